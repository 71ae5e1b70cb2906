"""Redundant computation in the manner of Bamboo: a pipeline that survives a lost stage without a restart.

Thorpe et al., "Bamboo: Making Preemptible Instances Resilient for Affordable Training of Large
DNNs", NSDI 2023: each pipeline stage also holds its successor's layers (a ring: the last stage
holds the first) and runs their forward redundantly, ideally in the pipeline's bubbles (redundant
computation, RC). When a stage is lost, its predecessor already holds its layers and takes over
(failover): no restart and no checkpoint read, but two stages on one node, slower, until a new
node replaces the lost one. Written by hand: no library schedules redundant work into bubbles.

Simulated here, on ``labkit.sim`` (torch's GPipe and 1F1B orders, redundant forwards added as
actions of phase "R"): the step with RC placed eagerly or in the bubbles, the redundant activations
held, the step after a failover, and RC's goodput beside checkpoint-restart (``interval``). The
real run (2 gloo ranks, one SIGKILLed, the survivor carrying on from its replica) is in
``labkit.resilience.failover``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from labkit.errors import LabkitError, require_choice, require_positive
from labkit.resilience.interval import DAY_S, cluster_mtbf_s
from labkit.sim import Action, Task, Timeline, schedule, simulate

KINDS = ("gpipe", "1f1b")
PLACEMENTS = ("none", "eager", "bubble")


def _check(kind: str, p: int, m: int, t_fwd: float, t_bwd: float) -> None:
    require_choice("kind", kind, KINDS)
    require_positive("p", p)
    if p < 2:
        raise LabkitError(f"p must be at least 2 for redundant computation: a stage needs a neighbour (got {p})")
    require_positive("t_fwd", t_fwd, integer=False)
    require_positive("t_bwd", t_bwd, integer=False)
    schedule(kind, p, m)  # refuses what torch refuses (1f1b needs m >= p)


def _deps(a: Action, p: int) -> tuple[str, ...]:
    """F(s,i) needs F(s-1,i); B(s,i) needs F(s,i) and B(s+1,i); R(s,i) needs F(s-1,i) (R(0,i) reads tokens)."""
    if a.phase == "B":
        return (str(Action(a.stage, "F", a.microbatch)),) + ((str(Action(a.stage + 1, "B", a.microbatch)),)
                                                             if a.stage < p - 1 else ())
    return (str(Action(a.stage - 1, "F", a.microbatch)),) if a.stage > 0 else ()


def _replay(programs: dict[str, list[Action]], p: int, t_fwd: float, t_bwd: float) -> Timeline:
    """Simulate each stream's program (stream name -> actions in order) with the pipeline's dependencies."""
    dur = {"F": t_fwd, "R": t_fwd, "B": t_bwd}
    return simulate([Task(str(a), stream, dur[a.phase], _deps(a, p), a.phase,
                          {"stage": a.stage, "microbatch": a.microbatch, "phase": a.phase})
                     for stream, acts in programs.items() for a in acts])


def _with_redundancy(order: dict[int, list[Action]], base: Timeline, p: int, m: int, t_fwd: float,
                     placement: str) -> dict[str, list[Action]]:
    """Rank r's program with R((r+1) % p, i) inserted: after each F (eager), or greedily into idle gaps.

    ``bubble``: before each action, run the ready redundant forwards (in micro-batch order) that
    end before that action started in the plain schedule, so nothing else moves; what does not fit
    runs after the rank's last action, before the optimizer step.
    """
    start = {e.name: e.start for e in base.events}
    end = {e.name: e.end for e in base.events}
    out: dict[str, list[Action]] = {}
    for r, acts in order.items():
        succ, prog = (r + 1) % p, []
        pending = [Action(succ, "R", i) for i in range(m)]
        done_f: set[int] = set(range(m)) if succ == 0 else set()
        clock = 0.0
        for a in acts:
            if placement == "bubble":
                while pending and pending[0].microbatch in done_f and clock + t_fwd <= start[str(a)] + 1e-12:
                    prog.append(pending.pop(0))
                    clock += t_fwd
            prog.append(a)
            clock = end[str(a)]
            if a.phase == "F":
                done_f.add(a.microbatch)
                if placement == "eager":
                    prog.append(pending.pop(pending.index(Action(succ, "R", a.microbatch))))
        out[f"rank {r}"] = prog + pending
    return out


@dataclass(frozen=True)
class RCStep:
    """One simulated step with redundant computation placed as ``placement``, beside the plain step."""

    kind: str
    p: int
    m: int
    placement: str
    timeline: Timeline
    plain_s: float
    in_bubble: tuple[int, ...]  # per rank: redundant forwards that ended within the plain step (in its idle time)
    held: tuple[int, ...]  # per rank: most redundant micro-batch activations held at once

    @property
    def step_s(self) -> float:
        return self.timeline.makespan

    @property
    def overhead(self) -> float:
        """Extra step time over the plain pipeline's step, as a fraction of it."""
        return self.step_s / self.plain_s - 1


def rc_step(kind: str, p: int, m: int, t_fwd: float = 1.0, t_bwd: float = 2.0, placement: str = "bubble") -> RCStep:
    """Simulate one step where rank r also runs the forward of stage (r+1) % p on every micro-batch.

    Each rank has m*t_fwd of redundant work and (p-1)(t_fwd+t_bwd) of idle time per step (GPipe,
    Huang et al. 2019), so RC can be free only while m*t_fwd <= (p-1)(t_fwd+t_bwd): see
    :func:`bubble_capacity`. A redundant activation is held from its R until the real stage's
    backward of that micro-batch ends (after that the real stage's gradient exists).
    """
    _check(kind, p, m, t_fwd, t_bwd)
    require_choice("placement", placement, PLACEMENTS)
    order = schedule(kind, p, m)
    base = _replay({f"rank {r}": acts for r, acts in order.items()}, p, t_fwd, t_bwd)
    if placement == "none":
        return RCStep(kind, p, m, placement, base, base.makespan, (0,) * p, (0,) * p)
    tl = _replay(_with_redundancy(order, base, p, m, t_fwd, placement), p, t_fwd, t_bwd)
    ends = {e.name: e.end for e in tl.events}
    in_bubble, held = [], []
    for r in range(p):
        rs = [e for e in tl.on(f"rank {r}") if e.kind == "R"]
        in_bubble.append(sum(e.end <= base.makespan + 1e-12 for e in rs))
        spans = [(e.start, ends[str(Action(e.meta["stage"], "B", e.meta["microbatch"]))]) for e in rs]
        held.append(max(sum(a <= s < b for a, b in spans) for s, _ in spans))
    return RCStep(kind, p, m, placement, tl, base.makespan, tuple(in_bubble), tuple(held))


def bubble_capacity(p: int, m: int, t_fwd: float = 1.0, t_bwd: float = 2.0) -> float:
    """Idle time per rank per step over the redundant work per rank: (p-1)(t_f+t_b) / (m t_f).

    Below 1, RC cannot fit in the bubbles whatever the placement: the step must grow by at least
    m t_f - (p-1)(t_f+t_b). Above 1 it may fit, if the gaps come after the activations are ready.
    """
    for name, value in (("p", p), ("m", m)):
        require_positive(name, value)
    return (p - 1) * (t_fwd + t_bwd) / (m * t_fwd)


def failover_step(kind: str, p: int, m: int, t_fwd: float = 1.0, t_bwd: float = 2.0, failed: int = 1) -> Timeline:
    """One step after stage ``failed`` is lost: its predecessor runs both stages, no redundancy left.

    The merged rank runs both programs in the order their actions started in the plain step (a
    valid order: a dependency always starts earlier), so the step is the plain schedule with one
    rank doing double work.
    """
    _check(kind, p, m, t_fwd, t_bwd)
    if not 0 <= failed < p:
        raise LabkitError(f"failed must be a stage in 0..{p - 1} (got {failed})")
    order = schedule(kind, p, m)
    base = _replay({f"rank {r}": acts for r, acts in order.items()}, p, t_fwd, t_bwd)
    programs: dict[str, list[Action]] = {}
    for e in sorted(base.events, key=lambda e: (e.start, e.meta["stage"])):
        holder = (e.meta["stage"] - 1) % p if e.meta["stage"] == failed else e.meta["stage"]
        programs.setdefault(f"rank {holder}", []).append(Action(e.meta["stage"], e.meta["phase"], e.meta["microbatch"]))
    return _replay(programs, p, t_fwd, t_bwd)


def rc_memory_bytes(stage_state_bytes: float, stage_activation_bytes: float, held: int) -> float:
    """Extra bytes on a rank: its successor's model states plus ``held`` micro-batches of its activations."""
    if stage_state_bytes < 0 or stage_activation_bytes < 0 or held < 0:
        raise LabkitError("stage_state_bytes, stage_activation_bytes and held must be >= 0 "
                          f"(got {stage_state_bytes!r}, {stage_activation_bytes!r}, {held!r})")
    return stage_state_bytes + held * stage_activation_bytes


@dataclass(frozen=True)
class RCGoodput:
    """Goodput of a pipeline with RC at one failure rate, and what the model leaves out."""

    goodput: float
    mtbf_s: float
    double_failures_per_day: float  # a stage and its replica's holder both down: RC cannot recover

    def lost_gpu_hours_per_day(self, n_gpus: int) -> float:
        return (1 - self.goodput) * n_gpus * 24


def goodput_redundant(overhead: float, slowdown: float, failover_s: float, replace_s: float,
                      rate_per_gpu_day: float, n_gpus: int) -> RCGoodput:
    """(1-o)(1 - (F+D)/M) + (D/M)/s: healthy at 1-o, paused F per failure, then D seconds at 1/s.

    o: RC's step overhead (``rc_step``), s: the failover step's slowdown (``failover_step``),
    M: the job's MTBF at the per-GPU rate (``interval.cluster_mtbf_s``). Goodput is useful work over
    wall time, relative to a pipeline without RC and without failures, as for checkpoint-restart.
    First order: valid while F + D is small beside M (refused once F + D >= M); overlapping
    failures do not compound the slowdown here. Double failures (the predecessor of a lost stage
    fails within F+D) need a checkpoint and are left out of the goodput; their rate is returned
    so a learner can see it is small.
    """
    if not 0 <= overhead < 1 or slowdown < 1:
        raise LabkitError(f"overhead must be in [0, 1) and slowdown >= 1 (got {overhead!r}, {slowdown!r})")
    if failover_s < 0 or replace_s < 0:
        raise LabkitError(f"failover_s and replace_s must be >= 0 seconds (got {failover_s!r}, {replace_s!r})")
    m = cluster_mtbf_s(rate_per_gpu_day, n_gpus)
    if failover_s + replace_s >= m:
        raise LabkitError(f"failover_s + replace_s ({failover_s + replace_s:g} s) must be shorter than the job's MTBF "
                          f"({m:.0f} s): failures would come faster than nodes are replaced")
    f, d = failover_s / m, replace_s / m
    good = (1 - overhead) * (1 - f - d) + d / slowdown
    neighbour = -math.expm1(-rate_per_gpu_day * (failover_s + replace_s) / DAY_S)
    return RCGoodput(min(1.0, max(0.0, good)), m, DAY_S / m * neighbour)
