"""The advisor's answer for people and programs: a text table of ranked plans, and plain JSON.

``labkit advise`` prints :func:`advice_text` (or :func:`advice_json` with ``--json``). Units: GB
(1e9 bytes) per GPU, seconds, USD and kg CO2 per step in the text; bytes, seconds, USD, joules
and kg in the JSON. Dollars say whether they are rented (cloud GPU-hours) or owned (purchase
price amortised); energy and carbon are a number or "unknown" with the reason, never NaN.
Plans within ``search.TIE_WITHIN`` of the best are marked as ties.
"""

from __future__ import annotations

import math

from labkit.advisor.costing import TIMES, Plan
from labkit.advisor.pricing import run_totals
from labkit.advisor.search import TIE_WITHIN, Advice
from labkit.errors import LabkitError
from labkit.hardware import GB
from labkit.predict.tables import text_table

MEMORY_PARTS = ("parameters", "gradients", "optimizer", "activations")


def _num(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) else None  # JSON has no NaN or infinity


def _co2(p: Plan) -> str:
    return "unknown" if p.kg_co2 is None else f"{p.kg_co2:,.3g}"


def _f(x: float | None, fmt: str) -> str:
    return "-" if x is None else format(x, fmt)


def plans_table(plans: list[Plan] | tuple[Plan, ...], ties: list[Plan] | tuple[Plan, ...] = ()) -> str:
    """Plans as a text table: GB = 1e9 bytes, seconds, tokens/s and model TFLOP/s per GPU, MFU, USD and kg CO2
    per step; ties with the best marked."""
    rows = [[p.layout.label + (" (tie)" if p in ties and len(ties) > 1 else ""), f"{p.memory_bytes / GB:,.1f}",
             f"{p.step_s:,.2f}", _f(p.tokens_per_s_per_gpu, ",.0f"), _f(p.model_tflops_per_gpu, ".0f"),
             _f(None if p.mfu is None else 100 * p.mfu, ".0f"), f"{p.usd:,.3g}", _co2(p), p.reason] for p in plans]
    basis = plans[0].usd_basis if plans and plans[0].usd_basis else ""
    return text_table(["plan", "GB/GPU", "step s", "tok/s/GPU", "TFLOP/s/GPU", "MFU %",
                       f"USD ({basis})" if basis else "USD", "kg CO2", "why"], rows)


def units_text(p: Plan) -> str:
    """A plan in the units published tables print: tokens/s and model TFLOP/s per GPU (with recompute), MFU."""
    if p.tokens_per_s_per_gpu is None:
        return "  no throughput: the step has no finite time"
    return (f"  {p.tokens_per_s_per_gpu:,.0f} tokens/s per GPU, {p.model_tflops_per_gpu:,.0f} model TFLOP/s per GPU "
            f"({p.hardware_tflops_per_gpu:,.0f} with recompute), MFU {100 * p.mfu:.0f}% of "
            f"{p.peak_flops / 1e12:,.0f} TFLOP/s; framework {p.framework}")


def run_text(p: Plan, tokens: float) -> str:
    """A training run of ``tokens`` tokens at this plan's step: days, GPU-hours, dollars, energy, carbon."""
    r = run_totals(p, tokens)
    if r["days"] is None:
        return f"  {tokens:,.4g} tokens: no finite step time"
    money = "unknown" if r["usd"] is None else f"{r['usd']:,.0f} USD ({p.usd_basis})"
    energy = "energy unknown" if r["kwh"] is None else f"{r['kwh']:,.0f} kWh, {r['kg_co2']:,.0f} kg CO2"
    return (f"  {tokens:,.4g} tokens = {r['steps']:,.0f} steps: {r['days']:,.2f} days, {r['gpu_hours']:,.0f} "
            f"GPU-hours, {money}, {energy}")


def breakdown_text(p: Plan) -> str:
    """One plan's step time and memory per GPU by part."""
    lines = [f"{p.layout.label}: {p.reason if p.feasible else 'does not fit: ' + p.reason}"]
    if p.times:
        parts = ", ".join(f"{k} {p.times[k]:,.3g}" for k in TIMES if p.times.get(k))
        lines.append(f"  step {p.step_s:,.4g} s = {parts} (s)")
        lines.append(units_text(p))
        lines += [f"  pipeline stages: {p.stage_split} layers"] if p.layout.pp > 1 and p.stage_split else []
    if p.memory:
        mem = ", ".join(f"{k} {p.memory[k] / GB:,.2f}" for k in MEMORY_PARTS)
        off = "".join(f", {k} {p.memory[k] / GB:,.1f} off the GPU" for k in ("dram", "nvme") if p.memory.get(k))
        lines.append(f"  memory {p.memory_bytes / GB:,.2f} GB per GPU = {mem} (GB){off}")
    return "\n".join(lines)


def plan_json(p: Plan, ties: list[Plan] | tuple[Plan, ...] = (), exact: bool = False) -> dict:
    """One plan as plain JSON: the layout's fields, its verdict, its breakdown of memory (bytes) and time (s)."""
    return {**p.layout.__dict__, "microbatches": p.microbatches, "feasible": p.feasible, "rule": p.rule,
            "reason": p.reason, "exact": exact, "tie": p in ties and len(ties) > 1,
            "memory_bytes": dict(p.memory), "times_s": dict(p.times), "step_s": _num(p.step_s),
            "usd": _num(p.usd), "usd_basis": p.usd_basis, "energy_j": _num(p.energy_j), "kg_co2": _num(p.kg_co2),
            "energy_note": p.energy_note, "framework": p.framework, "tokens_per_s_per_gpu": p.tokens_per_s_per_gpu,
            "model_tflops_per_gpu": p.model_tflops_per_gpu, "hardware_tflops_per_gpu": p.hardware_tflops_per_gpu,
            "mfu": p.mfu, "stage_layers": p.stage_split}


def advice_json(a: Advice, top: int = 5, tokens: float | None = None) -> dict:
    """What ``labkit advise --json`` prints: the priced layout first, the top kept plans, the nearest misses;
    with ``tokens``, each plan's whole run (``pricing.run_totals``)."""
    if top < 0:
        raise LabkitError(f"top must be a non-negative integer (got {top!r})")
    ties = a.ties()

    def one(p: Plan, exact: bool = False) -> dict:
        out = plan_json(p, ties, exact)
        return out | {"run": run_totals(p, tokens)} if tokens else out

    plans = [one(a.exact, True)] if a.exact is not None else []
    given = a.exact.layout if a.exact is not None else None
    plans += [one(p) for p in a.kept[:top] if p.layout != given]
    return {"model": a.model, "gpu": a.gpu, "gpus": a.gpus, "global_batch": a.global_batch, "seq": a.seq,
            "goal": a.goal, "framework": a.framework, "assumptions": list(a.assumptions),
            "tokens": tokens, "host": a.host, "host_limits": a.limits,
            "headroom": a.headroom,
            "usd_basis": a.usd_basis, "energy_note": a.energy_note, "tie_within": TIE_WITHIN,
            "kept_count": len(a.kept), "rejected_count": len(a.rejected), "rejected_by_reason": a.reasons(),
            "plans": plans, "nearest_misses": [plan_json(p) | {"gap": g} for p, g in a.gaps]}


def advice_text(a: Advice, top: int = 5, tokens: float | None = None) -> str:
    """The priced layout, the best ``top`` plans for the goal, why the others were rejected, the nearest misses;
    with ``tokens``, the whole run at the given layout's and the best plan's step."""
    if top < 0:
        raise LabkitError(f"top must be a non-negative integer (got {top!r})")
    head = (f"{a.model} on {a.gpus} x {a.gpu}, global batch {a.global_batch}, seq {a.seq}, goal {a.goal}, "
            f"framework {a.framework}: {len(a.kept)} plans kept, {len(a.rejected)} rejected")
    lines = [head, f"host {a.limits}; {a.headroom:.0%} of each GPU's memory kept free (--headroom)"]
    lines += [f"assumed from the framework profile (each with its flag): {'; '.join(a.assumptions)}"] \
        if a.assumptions else []
    lines += [""]
    if a.exact is not None:
        lines += ["the layout given, priced as given:", breakdown_text(a.exact)]
        lines += [run_text(a.exact, tokens)] if tokens else []
        lines += [""]
    ties = a.ties()
    if a.kept and top:
        if a.exact is None or a.kept[0].layout != a.exact.layout:
            lines += ["the best plan: " + breakdown_text(a.kept[0])]
            lines += [run_text(a.kept[0], tokens)] if tokens else []
        lines += [plans_table(a.kept[:top], ties)]
        if len(ties) > 1 and top > 1:
            lines.append(f"(tie): within {TIE_WITHIN:.0%} of the best, closer than the model's accuracy")
    elif not a.kept:
        lines.append(f"no plan fits on {a.gpus} x {a.gpu} in {a.limits}")
    if a.gaps:
        lines += ["", "nearest misses, and what would close the gap:"]
        lines += [f"  {p.layout.label}: {g}" for p, g in a.gaps]
    if a.reasons():
        lines += ["", "rejected, by the first rule broken: " + ", ".join(f"{k} {v}" for k, v in a.reasons().items())]
        for rule in a.reasons():
            example = next(p for p in a.rejected if p.rule == rule)
            lines.append(f"  e.g. {example.layout.label}: {example.reason}")
    notes = ["GB = 1e9 bytes", f"USD per step, {a.usd_basis}" + (
        " (cloud price per GPU-hour)" if a.usd_basis == "rented" else " (purchase price amortised)")]
    notes.append(f"kg CO2 {a.energy_note}" if a.energy_note else "kg CO2 per step")
    lines.append("; ".join(notes))
    return "\n".join(lines)
