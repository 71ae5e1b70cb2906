"""A SwapAdvisor-style genetic search over swap plans, scored by the simulator.

Huang, Jin and Li, "SwapAdvisor: Pushing Deep Learning Beyond the GPU Memory
Limit via Smart Swapping", ASPLOS 2020, search a dataflow graph's schedule,
memory allocation and swap plan with a genetic algorithm, each candidate scored by
a simulator of the GPU's compute and copy streams. This module keeps the part the
lab teaches, written by hand (no library has it): the genome is, per layer
operation, "swap its activation or not", "prefetch it how many backward ops
early" and "does the next forward wait for its swap-out" (``Plan.sync``: without
that wait, compute outruns a slow link, swapped activations pile up on the device
and no plan fits where vDNN's synchronised one does); the score is the simulated
iteration time of ``labkit.offload.iteration``, plus a penalty, when peak device
memory exceeds the budget, larger than any feasible plan's time (so any plan that fits beats every plan that does not).
The operator order and memory allocation are fixed (program order, no
fragmentation): SwapAdvisor also searches those.

The heuristics it is compared with: vDNN's (Rhu et al., MICRO 2016): offload
every activation of a chosen kind in forward, the next layer waiting for the
offload to finish, and prefetch it one layer ahead; and a greedy rule
(:func:`greedy`): swap the largest activations first, one at a time, until the
peak fits, with vDNN's synchronisation, at the best single prefetch distance.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from labkit.errors import LabkitError, require_positive
from labkit.offload.iteration import Machine, Op, Plan, Result, simulate_iteration

MAX_AHEAD = 4


@dataclass(frozen=True)
class Scored:
    """A plan with its score (seconds, penalised if over budget) and its simulated result."""

    plan: Plan
    score: float
    result: Result = field(compare=False, repr=False)

    @property
    def fits(self) -> bool:
        return self.score == self.result.time_s


@dataclass
class Search:
    """The best plan, best score per generation (for a convergence plot), and vDNN's plan under the same model."""

    best: Scored
    history: list[float]
    heuristic: Scored
    no_offload: Scored
    evaluations: int

    @property
    def speedup_over_heuristic(self) -> float:
        return self.heuristic.score / self.best.score


def penalty_scale(ops: list[Op], m: Machine, target: str = "host", path: str = "direct") -> float:
    """Sum of every task's duration with every op swapped: no plan's makespan can exceed it."""
    every = simulate_iteration(ops, m, Plan((True,) * len(ops), (1,) * len(ops), target, path))
    return sum(e.duration for e in every.timeline.events)


def score(ops: list[Op], m: Machine, plan: Plan, scale: float) -> Scored:
    """Simulated time; over budget adds ``scale * (1 + overflow / capacity)`` (a hard, graded penalty)."""
    res = simulate_iteration(ops, m, plan)
    over = res.peak_bytes - m.capacity_bytes
    return Scored(plan, res.time_s + (scale * (1 + over / m.capacity_bytes) if over > 0 else 0.0), res)


def vdnn_plan(ops: list[Op], kind: str = "", target: str = "host", path: str = "direct", sync: bool = True) -> Plan:
    """vDNN's heuristic: offload every op whose name contains ``kind`` ("" = all), prefetch one layer ahead.

    ``sync``: layer i + 1's forward waits for layer i's offload, as vDNN's memory manager does before it
    releases the buffer (Rhu et al., MICRO 2016, section 3).
    """
    return Plan(tuple(kind in o.name for o in ops), (1,) * len(ops), target, path, sync)


def greedy(ops: list[Op], m: Machine, target: str = "host", path: str = "direct") -> Scored:
    """Largest activations swapped first until the peak fits; the best of prefetch distances 1..MAX_AHEAD.

    Synchronised like vDNN (the next forward waits for the swap-out). When no prefix of the
    largest-first order fits, the plan that swaps everything is returned (scored with its penalty).
    """
    if not ops:
        raise LabkitError("ops must hold at least one operation")
    scale = penalty_scale(ops, m, target, path)
    order = sorted(range(len(ops)), key=lambda k: (-ops[k].act_bytes, k))
    best: Scored | None = None
    for ahead in range(1, MAX_AHEAD + 1):
        swap = [False] * len(ops)
        trial = score(ops, m, Plan(tuple(swap), (ahead,) * len(ops), target, path, True), scale)
        for i in order:
            if trial.fits:
                break
            swap[i] = True
            trial = score(ops, m, Plan(tuple(swap), (ahead,) * len(ops), target, path, True), scale)
        if best is None or trial.score < best.score:
            best = trial
    assert best is not None
    return best


def _random_plan(rng: random.Random, n: int, p_swap: float, target: str, path: str) -> Plan:
    return Plan(tuple(rng.random() < p_swap for _ in range(n)), tuple(rng.randint(1, MAX_AHEAD) for _ in range(n)),
                target, path, tuple(rng.random() < 0.5 for _ in range(n)))


def _crossover(rng: random.Random, a: Plan, b: Plan) -> Plan:
    """Uniform crossover, gene by gene (a gene = swap bit, prefetch distance and sync bit of one op)."""
    picks = [rng.random() < 0.5 for _ in a.swap]

    def mix(x: tuple, y: tuple) -> tuple:
        return tuple(u if p else v for p, u, v in zip(picks, x, y, strict=True))

    return Plan(mix(a.swap, b.swap), mix(a.ahead, b.ahead), a.target, a.path, mix(a.sync, b.sync))


def _mutate(rng: random.Random, p: Plan, rate: float) -> Plan:
    swap = tuple((not s) if rng.random() < rate else s for s in p.swap)
    ahead = tuple(rng.randint(1, MAX_AHEAD) if rng.random() < rate else a for a in p.ahead)
    sync = tuple((not s) if rng.random() < rate else s for s in p.sync)
    return Plan(swap, ahead, p.target, p.path, sync)


def search(ops: list[Op], m: Machine, *, seed: int = 0, population: int = 12, generations: int = 20,
           elite: int = 2, heuristic_kind: str = "", seed_heuristic: bool = True, target: str = "host",
           path: str = "direct") -> Search:
    """Genetic search (tournament of 3, uniform crossover, mutation 1/n per gene, ``elite`` kept unchanged).

    Deterministic for a seed. With ``seed_heuristic`` the vDNN plan (synchronised, as vDNN runs) and the
    no-offload plan are in the first population, so with elitism the best score is never worse than the
    heuristic's, and the best plan fits whenever vDNN's does.
    """
    require_positive("population", population)
    require_positive("generations", generations)
    if not 1 <= elite <= population:
        raise LabkitError(f"elite must be between 1 and population={population} (got {elite})")
    if not ops:
        raise LabkitError("ops must hold at least one operation")
    rng, n = random.Random(seed), len(ops)
    scale = penalty_scale(ops, m, target, path)
    heur = score(ops, m, vdnn_plan(ops, heuristic_kind, target, path), scale)
    plain = score(ops, m, Plan.none(n, target, path), scale)
    pop = [heur, plain] if seed_heuristic else []
    evals = 2
    while len(pop) < population:
        pop.append(score(ops, m, _random_plan(rng, n, rng.random(), target, path), scale))
        evals += 1
    pop.sort(key=lambda s: s.score)
    history = [pop[0].score]
    for _ in range(generations):
        nxt = pop[:elite]
        while len(nxt) < population:
            a = min(rng.sample(pop, 3), key=lambda s: s.score)
            b = min(rng.sample(pop, 3), key=lambda s: s.score)
            nxt.append(score(ops, m, _mutate(rng, _crossover(rng, a.plan, b.plan), 1 / n), scale))
            evals += 1
        pop = sorted(nxt, key=lambda s: s.score)
        history.append(pop[0].score)
    return Search(pop[0], history, heur, plain, evals)


def describe(s: Search, m: Machine) -> dict[str, float]:
    """Numbers for a table: seconds, peak GB (1e9 bytes), swapped share, against the compute-only time."""
    def row(x: Scored) -> tuple[float, float, float]:
        return x.result.time_s, x.result.peak_bytes / 1e9, sum(x.plan.swap) / len(x.plan.swap)
    out: dict[str, float] = {"budget_gb": m.capacity_bytes / 1e9, "evaluations": s.evaluations}
    for name, x in (("ga", s.best), ("vdnn", s.heuristic), ("none", s.no_offload)):
        out[f"{name}_time_s"], out[f"{name}_peak_gb"], out[f"{name}_swapped"] = row(x)
        out[f"{name}_fits"] = float(x.fits)
    return out
