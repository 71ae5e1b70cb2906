"""The pipeline bubble three ways: measured on real ranks, replayed from the measured durations, and the formula.

A measured bubble on a CPU mixes two things: the idle time the schedule itself causes (fill
and drain, (p-1)/(v*m+p-1) of the step for equal stages: Huang et al., "GPipe", NeurIPS 2019;
Narayanan et al., SC 2021, section 2.2), and time no stage computed for other reasons
(messages, Python and gloo overhead between actions, other processes on the same cores).
To tell them apart, each step's measured per-action durations are replayed through
``labkit.sim.replay_schedule``: the same order, the same compute, no messages and no gaps.

* ``measured``: 1 - busy / (p * span) of the real step (``pipeline.measured_bubble``);
* ``replayed``: the same for the replay; it can only be lower or equal, since every action
  of the real run started no earlier than the replay lets it (same order, same
  dependencies, same durations), so the gap measured - replayed is the overhead;
* ``formula``: (p-1)/(v*m+p-1).

The stages must be long enough that compute, not messaging, dominates: ``MODEL`` gives
stages of several milliseconds on this CPU. Each run trains ``steps`` steps on one
process group; the first is a warm-up (allocator, first messages) and is left out, the
others are repeats that give the spread.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

from labkit.errors import require_positive
from labkit.inter_layer.pipeline import PipelineConfig, PipelineRun, measured_bubble, run_pipelines, timeline_of
from labkit.measure.record import Record
from labkit.sim import Action, Timeline, bubble_fraction, replay_schedule, schedule, simulate_pipeline

MODEL: dict[str, Any] = {"n_layer": 4, "n_head": 4, "d_model": 128, "seq_len": 64, "dropout": 0.0}
BATCH = 32
CASES = (("gpipe", 1, 1), ("gpipe", 4, 1), ("gpipe", 8, 1), ("1f1b", 8, 1), ("interleaved", 8, 2))


@dataclass(frozen=True)
class BubbleResult:
    """One schedule on p ranks: the formula, and per repeated step the measured and replayed bubble."""

    label: str
    kind: str
    p: int
    m: int
    v: int
    formula: float
    measured: list[float]  # one per repeat
    replayed: list[float]
    compute_ms: list[float]  # mean duration of one action, per repeat
    step_ms: list[float]
    timelines: tuple[Timeline, Timeline] | None = None  # the last repeat: measured, replayed (seconds)

    @property
    def records(self) -> list[Record]:
        """Each repeated step's measured bubble beside the formula (fractions of the step; wall-clock, not asserted)."""
        return [Record(f"bubble, step {k + 1}", measured, self.formula, "fraction of the step",
                       "(p-1)/(v*m+p-1): Huang et al. 2019, Narayanan et al. 2021", note=f"replayed {replayed:.3f}",
                       where=(("schedule", self.label),))
                for k, (measured, replayed) in enumerate(zip(self.measured, self.replayed, strict=True))]

    @staticmethod
    def spread(xs: list[float]) -> tuple[float, float, float]:
        """(median, min, max)."""
        return statistics.median(xs), min(xs), max(xs)


def durations(run: PipelineRun, step: int) -> dict[Action, float]:
    """Seconds each action of ``step`` took on its rank (measured)."""
    return {Action(s, ph, i): b - a for r in run.ranks for st, s, ph, i, a, b in r["events"] if st == step}


def replay(run: PipelineRun, step: int) -> Timeline:
    """The step's schedule replayed with its measured durations: no messages, no gaps."""
    c = run.config
    return replay_schedule(schedule(c.kind, run.p, c.m, c.v), run.p * c.v, durations(run, step))


def label(kind: str, p: int, m: int, v: int = 1) -> str:
    name = {"gpipe": "GPipe", "1f1b": "1F1B", "interleaved": "interleaved"}[kind]
    return f"{name} p={p}" + (f" v={v}" if v > 1 else "") + f" m={m}"


def summarize(run: PipelineRun, steps: range) -> BubbleResult:
    """Measured and replayed bubble of each step in ``steps`` of one run."""
    c = run.config
    measured, replayed, compute, span = [], [], [], []
    for k in steps:
        real = timeline_of(run.ranks, k)
        measured.append(measured_bubble(real))
        replayed.append(measured_bubble(replay(run, k)))
        d = durations(run, k)
        compute.append(1e3 * sum(d.values()) / len(d))
        span.append(1e3 * real.makespan)
    last = steps[-1]
    return BubbleResult(label(c.kind, run.p, c.m, c.v), c.kind, run.p, c.m, c.v, bubble_fraction(run.p, c.m, c.v),
                        measured, replayed, compute, span, (timeline_of(run.ranks, last), replay(run, last)))


def measure(p: int = 2, cases: tuple[tuple[str, int, int], ...] = CASES, repeats: int = 3,
            model: dict[str, Any] | None = None, batch_size: int = BATCH) -> list[BubbleResult]:
    """Run each (kind, m, v) on p local ranks for 1 + ``repeats`` steps; the first step is a warm-up."""
    require_positive("repeats", repeats)
    configs = [PipelineConfig(kind, m, steps=1 + repeats, v=v, model=model or MODEL, batch_size=batch_size)
               for kind, m, v in cases]
    runs = run_pipelines(p, configs)
    return [summarize(run, range(1, 1 + repeats)) for run in runs]


def simulated(kind: str, p: int, m: int, v: int = 1, backward_over_forward: float = 2.0) -> float:
    """The bubble of ``labkit.sim``'s replay with equal stages (forward 1, backward ``backward_over_forward``)."""
    return measured_bubble(simulate_pipeline(kind, p, m, 1.0, backward_over_forward, v=v))
