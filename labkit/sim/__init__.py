"""An event timeline of streams, and the pipeline schedules it replays.

Written by hand: no library ships a simulator of pipeline schedules. torch runs them
(``torch.distributed.pipelining``) but only writes down their order; this module takes
that order, gives every action a duration and its data dependencies, and says when
each one starts, so a notebook can draw the bubble and measure it.

Two layers:

* ``simulate`` (in ``labkit.sim.timeline``, re-exported here): tasks on streams (a CUDA
  stream, a rank, a link, a disk). A stream runs its tasks in the order given, and a
  task starts once the previous task on its stream and all its dependencies have
  ended. Nothing else is modelled: no contention between streams.
* ``schedule`` / ``simulate_pipeline``: the GPipe, 1F1B and interleaved 1F1B orders,
  action by action as torch 2.13's ``ScheduleGPipe``, ``Schedule1F1B`` and
  ``ScheduleInterleaved1F1B`` run them (``torch_order`` reads torch's own order).

Formulas: bubble (p-1)/(m+p-1) of the step, Huang et al., "GPipe", NeurIPS 2019;
(p-1)/(v*m + p-1) with v chunks per rank, Narayanan et al., "Efficient Large-Scale
Language Model Training on GPU Clusters Using Megatron-LM", SC 2021, section 2.2.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from types import SimpleNamespace

from labkit.errors import LabkitError, require_choice, require_positive
from labkit.sim.timeline import Event, Task, Timeline, simulate

__all__ = ["KINDS", "PHASES", "Action", "Event", "Task", "Timeline", "bubble_fraction", "bubble_over_ideal",
           "measured_bubble", "peak_in_flight", "replay_schedule", "schedule", "simulate", "simulate_pipeline",
           "torch_order"]

KINDS = ("gpipe", "1f1b", "interleaved")
PHASES = ("F", "B")


@dataclass(frozen=True)
class Action:
    """One pipeline action: ``phase`` "F" (forward) or "B" (full backward) of a micro-batch on a stage."""

    stage: int
    phase: str
    microbatch: int

    def __str__(self) -> str:
        return f"{self.stage}{self.phase}{self.microbatch}"


def _check(kind: str, p: int, m: int, v: int) -> None:
    """The same constraints torch 2.13's schedule constructors enforce, named as torch names them."""
    require_choice("kind", kind, KINDS)
    require_positive("p", p)
    require_positive("m", m)
    require_positive("v", v)
    if kind != "interleaved" and v != 1:
        raise LabkitError(f"v (chunks per rank) must be 1 for kind={kind!r} (got {v}); use kind='interleaved'")
    if kind == "1f1b" and m < p:
        raise LabkitError(f"m must be >= p for 1f1b, as torch's Schedule1F1B requires (got m={m}, p={p})")
    if kind == "interleaved":
        if v < 2:
            raise LabkitError(f"v (chunks per rank) must be >= 2 for interleaved (got {v})")
        rounds = max(1, m // p)
        if m % rounds:
            raise LabkitError(f"m must be a multiple of the number of rounds max(1, m // p) = {rounds}, as torch's "
                              f"ScheduleInterleaved1F1B requires (got m={m}, p={p})")


def schedule(kind: str, p: int, m: int, v: int = 1) -> dict[int, list[Action]]:
    """Each rank's actions in program order, as torch's schedule of that kind runs them.

    Stages are 0..p*v-1 and rank r holds stages r, r+p, r+2p, ... GPipe runs every
    forward, then every backward. 1F1B runs p-r forwards, then alternates one
    backward and one forward, then drains. Interleaved 1F1B (torch's flexible
    version) walks its v chunks in rounds of m // max(1, m // p) micro-batches, warms
    up with (v-1)*round + 2*(p-1-r) forwards, then alternates.
    """
    _check(kind, p, m, v)
    if kind == "gpipe":
        return {r: [Action(r, "F", i) for i in range(m)] + [Action(r, "B", i) for i in range(m)] for r in range(p)}
    if kind == "1f1b":
        order: dict[int, list[Action]] = {}
        for r in range(p):
            warm = p - r
            acts = [Action(r, "F", i) for i in range(warm)]
            for i in range(m):
                acts.append(Action(r, "B", i))
                if warm + i < m:
                    acts.append(Action(r, "F", warm + i))
            order[r] = acts
        return order
    per_round = m // max(1, m // p)
    return {r: _interleaved_rank(r, p, m, v, per_round) for r in range(p)}


def _interleaved_rank(r: int, p: int, m: int, v: int, per_round: int) -> list[Action]:
    """Rank r of torch's ``ScheduleInterleaved1F1B``: chunk k//per_round mod v, backwards in reverse chunk order."""
    warm = min((v - 1) * per_round + 2 * (p - 1 - r), m * v)
    done: dict[tuple[str, int], int] = defaultdict(int)

    def act(phase: str, chunk: int) -> Action:
        stage = chunk * p + r
        done[phase, stage] += 1
        return Action(stage, phase, done[phase, stage] - 1)

    fwd = [act("F", (k // per_round) % v) for k in range(m * v)]
    bwd = [act("B", v - 1 - (k // per_round) % v) for k in range(m * v)]
    acts = fwd[:warm]
    for k in range(warm, m * v):
        acts += [fwd[k], bwd[k - warm]]
    return acts + bwd[m * v - warm:]


def torch_order(kind: str, p: int, m: int, v: int = 1) -> dict[int, list[Action]]:
    """torch's own ``pipeline_order`` for the schedule, without a process group.

    The constructors only read a few attributes of their stages (``num_stages``, and for
    the multi-stage schedule ``group_size``, ``group_rank``), so plain namespaces stand
    in for ``PipelineStage``. Idle slots (None) and non-compute actions (REDUCE_GRAD) are
    dropped. Note: torch 2.13's ``Schedule1F1B._get_pipeline_order`` numbers the last
    rank's forwards 1..m instead of 0..m-1 (its ``step`` runs 0..m-1, as ``schedule``
    does); this function returns torch's order as written.
    """
    from torch.distributed.pipelining import schedules as ts

    require_choice("kind", kind, KINDS)
    try:
        if kind == "interleaved":
            stages = [SimpleNamespace(num_stages=p * v, group_size=p, group_rank=0, stage_index=k * p,
                                      stage_index_to_group_rank=None) for k in range(v)]
            sched = ts.ScheduleInterleaved1F1B(stages, m)  # type: ignore[arg-type]
        else:
            if v != 1:
                raise ValueError(f"v must be 1 for {kind} (got {v})")
            cls = ts.ScheduleGPipe if kind == "gpipe" else ts.Schedule1F1B
            sched = cls(SimpleNamespace(num_stages=p), m)  # type: ignore[arg-type]
    except ValueError as err:
        raise LabkitError(f"torch refuses {kind} with p={p}, m={m}, v={v}: {err}") from err
    phase = {ts._ComputationType.FORWARD: "F", ts._ComputationType.FULL_BACKWARD: "B"}
    return {r: [Action(a.stage_index, phase[a.computation_type], a.microbatch_index)
                for a in acts if a is not None and a.computation_type in phase]
            for r, acts in (sched.pipeline_order or {}).items()}


def simulate_pipeline(kind: str, p: int, m: int, t_fwd: float, t_bwd: float, t_comm: float = 0.0,
                      v: int = 1) -> Timeline:
    """Replay ``schedule(kind, p, m, v)`` with t_fwd, t_bwd per stage per micro-batch (t/v per chunk).

    Streams "rank 0".."rank p-1" run the actions. F of stage s needs F of stage s-1,
    B of stage s needs F of stage s and B of stage s+1 (same micro-batch). With
    t_comm > 0 every activation or gradient crossing ranks is a task of t_comm
    seconds on the directed link stream "link a->b", sent first in, first out
    (one transfer at a time per direction); with t_comm = 0 there are no link tasks.
    """
    for name, value in (("t_fwd", t_fwd), ("t_bwd", t_bwd)):
        require_positive(name, value, integer=False)
    durations = {"F": t_fwd / v, "B": t_bwd / v}
    order = schedule(kind, p, m, v)
    return replay_schedule(order, p * v, {a: durations[a.phase] for acts in order.values() for a in acts}, t_comm)


def replay_schedule(order: Mapping[int, list[Action]], n_stages: int, durations: Mapping[Action, float],
                    t_comm: float = 0.0) -> Timeline:
    """Place each rank's actions (program order) with a duration of its own, in seconds.

    The same dependencies and links as :func:`simulate_pipeline`; ``durations`` gives
    every action its own time, for example the durations a real run measured, so the
    replay shows the schedule's bubble with that run's compute and nothing else (no
    messages when t_comm = 0, no overhead between actions).
    """
    if t_comm < 0:
        raise LabkitError(f"t_comm must be >= 0 (got {t_comm!r})")
    missing = [str(a) for acts in order.values() for a in acts if a not in durations]
    if missing:
        raise LabkitError(f"durations must give every action of the order a time; missing {', '.join(missing[:5])}")
    p = len(order)
    tasks: list[Task] = []
    links: list[Task] = []
    for r, acts in order.items():
        for a in acts:
            s, i = a.stage, a.microbatch
            src = s - 1 if a.phase == "F" else s + 1
            deps = [] if a.phase == "F" else [str(Action(s, "F", i))]
            if 0 <= src < n_stages:
                dep = str(Action(src, a.phase, i))
                deps.append(f"send {dep}" if t_comm > 0 else dep)
            meta = {"stage": s, "microbatch": i, "phase": a.phase}
            tasks.append(Task(str(a), f"rank {r}", durations[a], tuple(deps), a.phase, meta))
            dst = s + 1 if a.phase == "F" else s - 1
            if t_comm > 0 and 0 <= dst < n_stages:
                links.append(Task(f"send {a}", f"link {r}->{dst % p}", t_comm, (str(a),), "comm", meta))
    return simulate(tasks + links)


def bubble_fraction(p: int, m: int, v: int = 1) -> float:
    """Idle share of the step, (p-1)/(v*m + p-1): GPipe (NeurIPS 2019) for v=1, Narayanan et al. (SC 2021)."""
    for name, value in (("p", p), ("m", m), ("v", v)):
        require_positive(name, value)
    return (p - 1) / (v * m + p - 1)


def bubble_over_ideal(p: int, m: int, v: int = 1) -> float:
    """Bubble time over ideal compute time, (p-1)/(v*m) (Narayanan et al., SC 2021, section 2.2)."""
    for name, value in (("p", p), ("m", m), ("v", v)):
        require_positive(name, value)
    return (p - 1) / (v * m)


def measured_bubble(timeline: Timeline) -> float:
    """The idle fraction of the "rank ..." streams of a simulated pipeline."""
    return timeline.idle_fraction([s for s in timeline.streams if s.startswith("rank ")])


def peak_in_flight(actions: list[Action]) -> int:
    """Most micro-batches with forward done and backward not, summed over the rank's stage chunks.

    This is what sets activation memory: GPipe keeps m, 1F1B keeps p - r on rank r.
    """
    live = peak = 0
    for a in actions:
        require_choice("phase", a.phase, PHASES)
        live += 1 if a.phase == "F" else -1
        peak = max(peak, live)
    return peak
