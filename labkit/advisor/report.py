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
from labkit.advisor.search import TIE_WITHIN, Advice
from labkit.errors import LabkitError
from labkit.hardware import GB
from labkit.predict.tables import text_table

MEMORY_PARTS = ("parameters", "gradients", "optimizer", "activations")


def _num(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) else None  # JSON has no NaN or infinity


def _co2(p: Plan) -> str:
    return "unknown" if p.kg_co2 is None else f"{p.kg_co2:,.3g}"


def plans_table(plans: list[Plan] | tuple[Plan, ...], ties: list[Plan] | tuple[Plan, ...] = ()) -> str:
    """Plans as a text table: GB = 1e9 bytes, seconds, USD and kg CO2 per step; ties with the best marked."""
    rows = [[p.layout.label + (" (tie)" if p in ties and len(ties) > 1 else ""), f"{p.memory_bytes / GB:,.1f}",
             f"{p.step_s:,.2f}", f"{p.usd:,.3g}", _co2(p), p.reason] for p in plans]
    basis = plans[0].usd_basis if plans and plans[0].usd_basis else ""
    return text_table(["plan", "GB/GPU", "step s", f"USD ({basis})" if basis else "USD", "kg CO2", "why"], rows)


def breakdown_text(p: Plan) -> str:
    """One plan's step time and memory per GPU by part."""
    lines = [f"{p.layout.label}: {p.reason if p.feasible else 'does not fit: ' + p.reason}"]
    if p.times:
        parts = ", ".join(f"{k} {p.times[k]:,.3g}" for k in TIMES if p.times.get(k))
        lines.append(f"  step {p.step_s:,.4g} s = {parts} (s)")
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
            "energy_note": p.energy_note}


def advice_json(a: Advice, top: int = 5) -> dict:
    """What ``labkit advise --json`` prints: the priced layout first, the top kept plans, the nearest misses."""
    if top < 0:
        raise LabkitError(f"top must be a non-negative integer (got {top!r})")
    ties = a.ties()
    plans = [plan_json(a.exact, ties, exact=True)] if a.exact is not None else []
    given = a.exact.layout if a.exact is not None else None
    plans += [plan_json(p, ties) for p in a.kept[:top] if p.layout != given]
    return {"model": a.model, "gpu": a.gpu, "gpus": a.gpus, "global_batch": a.global_batch, "seq": a.seq,
            "goal": a.goal, "host": a.host, "host_limits": a.limits, "headroom": a.headroom,
            "usd_basis": a.usd_basis, "energy_note": a.energy_note, "tie_within": TIE_WITHIN,
            "kept_count": len(a.kept), "rejected_count": len(a.rejected), "rejected_by_reason": a.reasons(),
            "plans": plans, "nearest_misses": [plan_json(p) | {"gap": g} for p, g in a.gaps]}


def advice_text(a: Advice, top: int = 5) -> str:
    """The priced layout, the best ``top`` plans for the goal, why the others were rejected, the nearest misses."""
    if top < 0:
        raise LabkitError(f"top must be a non-negative integer (got {top!r})")
    head = (f"{a.model} on {a.gpus} x {a.gpu}, global batch {a.global_batch}, seq {a.seq}, goal {a.goal}: "
            f"{len(a.kept)} plans kept, {len(a.rejected)} rejected")
    lines = [head, f"host {a.limits}; {a.headroom:.0%} of each GPU's memory kept free (--headroom)", ""]
    if a.exact is not None:
        lines += ["the layout given, priced as given:", breakdown_text(a.exact), ""]
    ties = a.ties()
    if a.kept and top:
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
