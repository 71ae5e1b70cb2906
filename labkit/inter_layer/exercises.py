"""Notebook 02's self-check exercises, each with its likely mistakes named.

Importing this module registers them with :mod:`labkit.teach.checks` (notebook 02 does).
"""

from __future__ import annotations

from labkit.predict.estimate import model_state_bytes
from labkit.teach.checks import EXERCISES, Exercise, Mistake


def _states_gb(params: float, stage: int, dp: int) -> float:
    return sum(model_state_bytes(int(params), "bf16-mixed", stage, dp).values()) / 1e9


def _bubble_p8_m32() -> float:
    from labkit.sim import bubble_fraction

    return bubble_fraction(8, 32)


def _zero3_gb_per_gpu() -> float:
    return _states_gb(70e9, 3, 64)


def _pipedream_versions_first_stage(p: int = 4) -> float:
    from labkit.sim import peak_in_flight, schedule

    return float(peak_in_flight(schedule("1f1b", p, 4 * p)[0]))



_INTER_LAYER: dict[str, Exercise] = {
    "02.bubble": Exercise(
        "What fraction of a 1F1B step is bubble with p = 8 stages and m = 32 micro-batches (a number in 0..1)?",
        _bubble_p8_m32,
        0.01,
        "The bubble is (p-1)/(m+p-1) of the total time, whatever the schedule keeps in memory.",
        lambda: f"7/39 = {100 * _bubble_p8_m32():.0f}%: to get it down to 5% you need m = 19(p-1) = 133 "
        "micro-batches, or interleaving.",
        (Mistake("(p-1)/m, the bubble relative to the useful time, not to the total", lambda: 7 / 32),),
    ),
    "02.zero3_gb": Exercise(
        "GB per GPU of model states for a 70bn-parameter model with mixed-precision Adam under ZeRO-3 on 64 GPUs?",
        _zero3_gb_per_gpu,
        0.02,
        "Stage 3 divides all 16 bytes per parameter by Nd: 16 * 70e9 / 64, then divide by 1e9.",
        lambda: f"{_zero3_gb_per_gpu():.1f} GB: it fits an 80 GB GPU with room for activations; "
        f"without ZeRO it is {_states_gb(70e9, 0, 64):,.0f} GB.",
        (Mistake("the 1/Nd left out: that is every GPU holding all states, no ZeRO", lambda: _states_gb(70e9, 0, 64)),
         Mistake("stage 2's layout (16-bit weights on every GPU)", lambda: _states_gb(70e9, 2, 64)),
         Mistake("12 bytes per parameter (optimizer states only) divided by Nd", lambda: 12 * 70e9 / 64 / 1e9)),
    ),
    "02.pipedream_versions": Exercise(
        "How many weight versions does PipeDream stash at the FIRST of 4 pipeline stages in its steady state?",
        _pipedream_versions_first_stage,
        0.0,
        "One version per mini-batch whose forward has run and backward has not: how many are in flight at stage 0?",
        "p = 4: the first stage starts p forwards before its first backward, so it keeps p versions.",
    ),
}

EXERCISES.update(_INTER_LAYER)
