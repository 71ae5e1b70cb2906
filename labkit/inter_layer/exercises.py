"""Notebook 02's self-check exercises, each with its likely mistakes named.

Importing this module registers them with :mod:`labkit.teach.checks` (notebook 02 does).
"""

from __future__ import annotations

from labkit.predict.estimate import model_state_bytes
from labkit.teach.checks import EXERCISES, Exercise, Mistake


def _states_gb(params: float, stage: int, dp: int) -> float:
    return sum(model_state_bytes(int(params), "bf16-mixed", stage, dp).values()) / 1e9


def _bubble(p: int = 8, m: int = 32) -> float:
    from labkit.sim import bubble_fraction

    return bubble_fraction(p, m)


def _zero3_gb_per_gpu() -> float:
    return _states_gb(70e9, 3, 64)


def _stash_gb(versions: float | None = None, p: int = 8, stage_share: bool = True) -> float:
    """GB of 16-bit weights PipeDream's first stage holds: its layers' weights times the versions in flight.

    PipeDream (Narayanan et al., SOSP 2019) stashes one weight version per mini-batch whose
    forward has run at the stage and whose backward has not: the 1F1B schedule's in-flight count.
    """
    from labkit.shapes import model_shape
    from labkit.sim import peak_in_flight, schedule

    if versions is None:
        versions = float(peak_in_flight(schedule("1f1b", p, 4 * p)[0]))
    params = model_shape("gpt3-175b").params
    return versions * 2 * params / (p if stage_share else 1) / 1e9


_INTER_LAYER: dict[str, Exercise] = {
    "02.bubble": Exercise(
        "What fraction of a 1F1B step is bubble with p = 8 stages and m = 32 micro-batches (a number in 0..1)?",
        _bubble,
        0.01,
        ("A stage idles while the pipeline fills and drains: p - 1 micro-batch slots at the start and at the end.",
         "The bubble is (p-1)/(m+p-1) of the total time, whatever the schedule keeps in memory."),
        lambda: f"7/39 = {100 * _bubble():.0f}%: to get it down to 5% you need m = 19(p-1) = 133 "
        "micro-batches, or interleaving.",
        (Mistake("(p-1)/m, the bubble relative to the useful time, not to the total", lambda: 7 / 32),
         Mistake("p/(m+p): p slots of fill counted, where the first stage starts at once and p - 1 wait",
                 lambda: 8 / 40),
         Mistake("p and m swapped: (m-1)/(m+p-1)", lambda: 31 / 39)),
        unit="fraction",
    ),
    "02.zero3_gb": Exercise(
        "GB per GPU of model states for a 70bn-parameter model with mixed-precision Adam under ZeRO-3 on 64 GPUs?",
        _zero3_gb_per_gpu,
        0.02,
        ("Mixed-precision Adam holds 16 bytes per parameter; which of them does stage 3 partition?",
         "Stage 3 divides all 16 bytes per parameter by Nd: 16 * 70e9 / 64, then divide by 1e9."),
        lambda: f"{_zero3_gb_per_gpu():.1f} GB: it fits an 80 GB GPU with room for activations; "
        f"without ZeRO it is {_states_gb(70e9, 0, 64):,.0f} GB.",
        (Mistake("the 1/Nd left out: that is every GPU holding all states, no ZeRO", lambda: _states_gb(70e9, 0, 64)),
         Mistake("stage 2's layout (16-bit weights on every GPU)", lambda: _states_gb(70e9, 2, 64)),
         Mistake("12 bytes per parameter (optimizer states only) divided by Nd", lambda: 12 * 70e9 / 64 / 1e9)),
        unit="GB",
    ),
    "02.pipedream_stash_gb": Exercise(
        "PipeDream with weight stashing (no flush) runs GPT-3 175B on p = 8 stages, each holding an eighth of the "
        "model's 16-bit weights. How many GB (1e9 bytes) of weights does the FIRST stage hold in its steady state, "
        "counting every stashed version?",
        _stash_gb,
        0.02,
        ("A stage keeps one version of its weights per mini-batch whose forward it has run and whose backward it "
         "has not. How many are in flight at the first stage of a p-stage 1F1B pipeline?",
         "The first stage starts p forwards before its first backward, so it holds p versions of its own layers: "
         "p x (2 bytes x parameters / p)."),
        lambda: f"{_stash_gb():.0f} GB: p versions of an eighth of the model, a whole model's worth of 16-bit "
        "weights on one GPU; PipeDream-2BW keeps 2 versions and PipeDream-Flush 1, at the price of a bubble.",
        (Mistake("one version only: that is PipeDream-Flush (1F1B with a flush), which stashes nothing",
                 lambda: _stash_gb(1.0)),
         Mistake("two versions: that is PipeDream-2BW's double buffering", lambda: _stash_gb(2.0)),
         Mistake("each version counted as the whole model, not the stage's eighth of it",
                 lambda: _stash_gb(stage_share=False))),
        unit="GB",
    ),
}

EXERCISES.update(_INTER_LAYER)
