"""Around the best plans: the choices searched there (attention, sequence parallelism, the interleaved schedule),
near-ties ordered simplest first, and the caller's pipeline choices dropped where a layout has no pipeline.

The advisor (``search``) ranks every layout; here it refines the best few and breaks near-ties: a
step-time model that matches published runs to about 10-15% (``reference_sets``) cannot rank two
plans a few percent apart, so the one that asks less of its user goes first.
"""

from __future__ import annotations

from dataclasses import replace

from labkit.advisor.layout import Layout, Plan
from labkit.predict import attention as attn
from labkit.shapes import ModelShape

TIE_WITHIN = 0.03


def variants(shape: ModelShape, lay: Layout, fixed: dict) -> list[Layout]:
    """``lay`` with the choices searched around the best plans (those the caller did not fix): the attention
    kernel, sequence parallelism (tp > 1) and the interleaved schedule with the fewest chunks that divide
    every stage (pp > 1). Each only adds memory to the defaults, so plans rejected for memory need none."""
    # the ring is fused, and so is torchtitan's op policy (it keeps the SDPA kernel's output)
    atts = [lay.attention] if "attention" in fixed or lay.cp > 1 or lay.recompute == "op" else list(attn.KINDS)
    sps = [lay.sp] if "sp" in fixed or lay.tp == 1 else [True, False]
    scheds = [(lay.schedule, lay.chunks)]
    if lay.pp > 1 and not {"schedule", "chunks"} & set(fixed):
        counts = lay.stage_layers(shape.layers)
        v = next((v for v in range(2, min(counts) + 1) if all(n % v == 0 for n in counts)), 0)
        scheds += [("interleaved", v)] if v else []
    return [replace(lay, attention=a, sp=sp, schedule=sc, chunks=c) for a in atts for sp in sps for sc, c in scheds
            if (a, sp, sc, c) != (lay.attention, lay.sp, lay.schedule, lay.chunks)]


def complexity(lay: Layout) -> tuple:
    """What a plan asks of its user, least first: 8-bit states, offload, parallel dimensions, ZeRO stage,
    recompute, interleaving, no sequence parallelism, explicit attention. Near-ties go to the simpler plan."""
    return (lay.optimizer_bits == 8, lay.offload != "none", sum(d > 1 for d in (lay.dp, lay.tp, lay.pp, lay.cp)),
            lay.zero_stage, lay.recompute != "none", lay.chunks, not lay.sp, lay.attention != "fused")


def simpler_first(ranked: list[Plan], goal: str, within: float = TIE_WITHIN) -> list[Plan]:
    """``ranked`` (best first) with the plans tied with the best (within ``within``) ordered simplest first."""
    if not ranked:
        return ranked
    best = ranked[0].metric(goal)
    ties = [p for p in ranked if p.metric(goal) <= best * (1 + within)]
    return sorted(ties, key=lambda p: (complexity(p.layout), p.metric(goal))) + ranked[len(ties):]


def valid_extras(extras: dict, pp: int) -> dict:
    """The caller's schedule and stage choices, dropped where a searched layout has no pipeline to apply them to."""
    if pp > 1:
        return extras
    drop = {"first_stage_layers", "last_stage_layers"}
    drop |= {"schedule", "chunks"} if extras.get("schedule") == "interleaved" else set()
    return {k: v for k, v in extras.items() if k not in drop}
