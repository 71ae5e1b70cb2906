"""The pipeline bubble three ways: measured on real ranks, replayed from the measured durations, and the formula.

A measured bubble on a CPU mixes two things: the idle time the schedule itself causes (fill
and drain, (p-1)/(v*m+p-1) of the step for equal stages: Huang et al., "GPipe", NeurIPS 2019;
Narayanan et al., SC 2021, section 2.2), and time no stage computed for other reasons
(messages, Python and gloo overhead between actions, other processes on the same cores).
To tell them apart, each step's measured per-action durations are replayed through
``labkit.sim.replay_schedule``: the same order, the same compute, no messages and no gaps.

* ``measured``: 1 - busy / (p * span) of the real step (``pipeline.measured_bubble``);
* ``replayed``: the same for the schedule replayed with each stage's forward and backward
  timed alone, apart from the schedule (``pipeline.op_times``: CPU seconds, one rank at a time, in
  rounds), each stage at its fastest round, since interference only ever adds time; one replay per
  round gives the range, which shows what the load still moved. Runs
  with the same m and v pool their rounds, so GPipe and 1F1B at the same m are replayed with
  the same stage costs and differ only by their schedules. This is the schedule's own bubble
  with this CPU's (uneven) stages: load on the machine changes it little, since the rounds
  spread the load over every stage alike (issue 40: replaying each step's own action times
  let one slowed patch of a step show as a bubble, and inverted the trends);
* ``as_run``: the replay of each step with its own measured action times. It can only be
  lower than or equal to ``measured``, since every action of the real run started no earlier
  than that replay lets it (same order, same dependencies, same durations), so the gap
  measured - as_run is the overhead;
* ``formula``: (p-1)/(v*m+p-1).

The stages must be long enough that compute, not messaging, dominates: ``MODEL`` gives
stages of several milliseconds on this CPU. Each run trains ``steps`` steps on one
process group; the first is a warm-up (allocator, first messages) and is left out, the
others are repeats that give the spread of ``measured`` and ``as_run``.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
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
    """One schedule on p ranks: the formula; per round the replayed bubble; per repeated step the measured one."""

    label: str
    kind: str
    p: int
    m: int
    v: int
    formula: float
    measured: list[float]  # one per repeated step
    replayed: list[float]  # one per round of stage timings (op_times), pooled over runs of the same m and v
    replayed_best: float  # the replay with each stage at its fastest round: the figure to read
    as_run: list[float]  # one per repeated step: that step replayed with its own action times
    compute_ms: list[float]  # mean duration of one action, per repeat
    step_ms: list[float]
    timelines: tuple[Timeline, Timeline] | None = None  # the last repeat: measured, replayed as run (seconds)

    @property
    def records(self) -> list[Record]:
        """Each repeated step's measured bubble beside the formula (fractions of the step; wall-clock, not asserted)."""
        return [Record(f"bubble, step {k + 1}", measured, self.formula, "fraction of the step",
                       "(p-1)/(v*m+p-1): Huang et al. 2019, Narayanan et al. 2021", note=f"replayed as run {rep:.3f}",
                       where=(("schedule", self.label),))
                for k, (measured, rep) in enumerate(zip(self.measured, self.as_run, strict=True))]

    @staticmethod
    def spread(xs: list[float]) -> tuple[float, float, float]:
        """(median, min, max)."""
        return statistics.median(xs), min(xs), max(xs)


def durations(run: PipelineRun, step: int) -> dict[Action, float]:
    """Seconds each action of ``step`` took on its rank (measured)."""
    return {Action(s, ph, i): b - a for r in run.ranks for st, s, ph, i, a, b in r["events"] if st == step}


def replay(run: PipelineRun, step: int) -> Timeline:
    """The step's schedule replayed with its own measured durations: no messages, no gaps."""
    c = run.config
    return replay_schedule(schedule(c.kind, run.p, c.m, c.v), run.p * c.v, durations(run, step))


def replay_ops(kind: str, p: int, m: int, v: int, ops: dict[tuple[int, str], float]) -> Timeline:
    """The schedule replayed with one time per (stage, phase): every micro-batch of a stage costs the same."""
    order = schedule(kind, p, m, v)
    return replay_schedule(order, p * v, {a: ops[(a.stage, a.phase)] for acts in order.values() for a in acts})


def rounds_of(op_times: dict[tuple[int, str], list[float]]) -> list[dict[tuple[int, str], float]]:
    """The rounds of stage timings, each a complete (stage, phase) -> seconds mapping."""
    n = min(len(v) for v in op_times.values())
    return [{k: v[i] for k, v in op_times.items()} for i in range(n)]


def label(kind: str, p: int, m: int, v: int = 1) -> str:
    name = {"gpipe": "GPipe", "1f1b": "1F1B", "interleaved": "interleaved"}[kind]
    return f"{name} p={p}" + (f" v={v}" if v > 1 else "") + f" m={m}"


def summarize(run: PipelineRun, steps: range, rounds: list[dict[tuple[int, str], float]]) -> BubbleResult:
    """Measured and as-run bubble of each step in ``steps`` of one run; replayed bubble of each round of stage times."""
    c = run.config
    measured, as_run, compute, span = [], [], [], []
    for k in steps:
        real = timeline_of(run.ranks, k)
        measured.append(measured_bubble(real))
        as_run.append(measured_bubble(replay(run, k)))
        d = durations(run, k)
        compute.append(1e3 * sum(d.values()) / len(d))
        span.append(1e3 * real.makespan)
    replayed = [measured_bubble(replay_ops(c.kind, run.p, c.m, c.v, ops)) for ops in rounds]
    fastest = {k: min(o[k] for o in rounds) for k in rounds[0]}  # interference only ever adds time
    best = measured_bubble(replay_ops(c.kind, run.p, c.m, c.v, fastest))
    last = steps[-1]
    return BubbleResult(label(c.kind, run.p, c.m, c.v), c.kind, run.p, c.m, c.v, bubble_fraction(run.p, c.m, c.v),
                        measured, replayed, best, as_run, compute, span,
                        (timeline_of(run.ranks, last), replay(run, last)))


def op_rounds(m: int) -> int:
    """Rounds of stage timings for m micro-batches: a few for big ones (each round is the longest), 8 at most."""
    return min(8, max(2, m))


def measure(p: int = 2, cases: tuple[tuple[str, int, int], ...] = CASES, repeats: int = 3,
            model: dict[str, Any] | None = None, batch_size: int = BATCH) -> list[BubbleResult]:
    """Run each (kind, m, v) on p local ranks for 1 + ``repeats`` steps (the first a warm-up), then time its
    stages alone (``op_rounds(m)`` rounds); runs of the same m and v share their rounds."""
    require_positive("repeats", repeats)
    configs = [PipelineConfig(kind, m, steps=1 + repeats, v=v, model=model or MODEL, batch_size=batch_size,
                              op_rounds=op_rounds(m)) for kind, m, v in cases]  # fmt: skip
    runs = run_pipelines(p, configs)
    pooled: dict[tuple[int, int], list] = defaultdict(list)
    for run in runs:
        pooled[(run.config.m, run.config.v)] += rounds_of(run.op_times)
    return [summarize(run, range(1, 1 + repeats), pooled[(run.config.m, run.config.v)]) for run in runs]


def trends(results: list[BubbleResult]) -> dict[str, bool]:
    """What the lesson claims of the replayed column (each stage at its fastest round), each True or False:
    the bubble falls as m grows (GPipe), interleaving shrinks it below 1F1B at the same m, and GPipe and
    1F1B at the same m are within 2 points of each other (the same formula; they differ only by uneven stages)."""
    med = {(r.kind, r.m, r.v): r.replayed_best for r in results}
    gpipe = sorted((m, b) for (k, m, _), b in med.items() if k == "gpipe")
    out = {"GPipe's bubble falls as m grows": all(a[1] > b[1] for a, b in zip(gpipe, gpipe[1:], strict=False))}
    for (k, m, v), b in med.items():
        if k == "interleaved" and ("1f1b", m, 1) in med:
            out[f"interleaved v={v} m={m} below 1F1B m={m}"] = b < med[("1f1b", m, 1)]
        if k == "1f1b" and ("gpipe", m, 1) in med:
            out[f"GPipe m={m} within 2 points of 1F1B m={m}"] = abs(b - med[("gpipe", m, 1)]) <= 0.02
    return out


def table(results: list[BubbleResult]) -> str:
    """Formula; replayed (stages at their fastest round, and the range of the single rounds); measured (median and
    range over the steps); one action's mean and the step (wall-clock, median and range)."""
    from labkit.predict.tables import text_table

    def cell(mid: float, xs: list[float], scale: float = 100, unit: str = "%") -> str:
        return f"{scale * mid:.0f}{unit} ({scale * min(xs):.0f}-{scale * max(xs):.0f})"

    med = statistics.median
    rows = [[r.label, f"{100 * r.formula:.0f}%", cell(r.replayed_best, r.replayed), cell(med(r.measured), r.measured),
             cell(med(r.compute_ms), r.compute_ms, 1, " ms"), cell(med(r.step_ms), r.step_ms, 1, " ms")]
            for r in results]
    return text_table(["schedule", "formula", "replayed", "measured", "one action", "step"], rows)


def simulated(kind: str, p: int, m: int, v: int = 1, backward_over_forward: float = 2.0) -> float:
    """The bubble of ``labkit.sim``'s replay with equal stages (forward 1, backward ``backward_over_forward``)."""
    return measured_bubble(simulate_pipeline(kind, p, m, 1.0, backward_over_forward, v=v))
