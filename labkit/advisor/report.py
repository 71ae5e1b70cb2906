"""The advisor's answer for people and programs: a text table of ranked plans, and plain JSON.

``labkit advise`` prints :func:`advice_text` (or :func:`advice_json` with ``--json``). Units: GB
(1e9 bytes) per GPU, seconds, USD and kg CO2 per step in the text; bytes, seconds, USD, joules
and kg in the JSON.
"""

from __future__ import annotations

import math

from labkit.advisor.costing import Plan
from labkit.advisor.search import Advice
from labkit.errors import LabkitError
from labkit.hardware import GB
from labkit.tables import text_table


def plans_table(plans: list[Plan] | tuple[Plan, ...]) -> str:
    """Plans as a text table: GB = 1e9 bytes, seconds, USD and kg CO2 per step."""
    rows = [[p.layout.label, f"{p.memory_bytes / GB:,.1f}", f"{p.step_s:,.2f}", f"{p.usd:,.3g}",
             f"{p.kg_co2:,.3g}", p.reason] for p in plans]
    return text_table(["plan", "GB/GPU", "step s", "USD", "kg CO2", "why"], rows)


def advice_json(a: Advice, top: int = 5) -> dict:
    """What ``labkit advise --json`` prints: the top kept plans and a sample of rejections by reason."""
    if top < 0:
        raise LabkitError(f"top must be a non-negative integer (got {top!r})")

    def num(x: float) -> float | None:
        return x if math.isfinite(x) else None  # JSON has no NaN or infinity

    def plain(p: Plan) -> dict:
        return {**p.layout.__dict__, "microbatches": p.microbatches, "feasible": p.feasible, "rule": p.rule,
                "reason": p.reason,
                "memory_bytes": dict(p.memory), "times_s": dict(p.times),
                "step_s": num(p.step_s), "usd": num(p.usd), "energy_j": num(p.energy_j), "kg_co2": num(p.kg_co2)}

    return {"model": a.model, "gpu": a.gpu, "gpus": a.gpus, "global_batch": a.global_batch, "seq": a.seq,
            "goal": a.goal, "kept_count": len(a.kept), "rejected_count": len(a.rejected),
            "rejected_by_reason": a.reasons(), "plans": [plain(p) for p in a.kept[:top]]}


def advice_text(a: Advice, top: int = 5) -> str:
    """The best ``top`` plans for the goal, the count kept, and why the others were rejected."""
    if top < 0:
        raise LabkitError(f"top must be a non-negative integer (got {top!r})")
    head = (f"{a.model} on {a.gpus} x {a.gpu}, global batch {a.global_batch}, seq {a.seq}, goal {a.goal}: "
            f"{len(a.kept)} plans kept, {len(a.rejected)} rejected")
    lines = [head, ""]
    lines += [plans_table(a.kept[:top]) if a.kept else "no plan fits: see the reasons below"]
    lines += ["", "rejected, by the first rule broken: " + ", ".join(f"{k} {v}" for k, v in a.reasons().items())]
    for rule in a.reasons():
        example = next(p for p in a.rejected if p.rule == rule)
        lines.append(f"  e.g. {example.layout.label}: {example.reason}")
    lines.append("GB = 1e9 bytes; USD and kg CO2 per step")
    return "\n".join(lines)
