"""SwapAdvisor's genetic search against a greedy rule and vDNN's, over how far the activations overflow.

The question a single example cannot answer: when does searching pay? Here the device is
a catalogue GPU whose budget leaves ``1 / r`` of the room the activations need without
offload (``r``, the oversubscription: 1.1 = 10% too little room, 3 = a third of it). The
resident bytes are computed, not typed: model states at 16 bytes per parameter (ZeRO, SC
2020, mixed precision with Adam) plus the activations outside the transformer layers
(``estimate.activation_bytes_outside_layers``). At each ``r`` the genetic search
(``swapadvisor.search``) runs with several seeds (it is random: its spread is part of the
answer), beside the greedy largest-first rule (``swapadvisor.greedy``) and vDNN's rule
(swap everything), all scored by the same simulator (``offload.iteration``). Every figure
is predicted; each search is deterministic for its seed.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from labkit.errors import LabkitError, require_positive
from labkit.hardware import gpu
from labkit.offload import swapadvisor
from labkit.offload.iteration import Machine, Op, Plan, compute_time, machine, simulate_iteration, transformer_ops
from labkit.predict.estimate import activation_bytes_outside_layers, model_state_bytes
from labkit.shapes import ModelShape

RATIOS = (1.05, 1.1, 1.5, 2.0, 3.0)
SEEDS = (0, 1, 2, 3, 4)


@dataclass(frozen=True)
class Point:
    """One oversubscription: the budget, and each plan's slowdown over compute alone (0.1 = 10% slower)."""

    ratio: float
    capacity_bytes: float
    ga: tuple[float, ...]  # one per seed; inf where the best plan found does not fit
    greedy: float
    vdnn: float
    greedy_swaps: dict[str, int] = field(default_factory=dict, compare=False)  # swapped ops by kind (attn, mlp)
    ga_swaps: tuple[dict[str, int], ...] = field(default=(), compare=False)  # one per seed

    @property
    def ga_median(self) -> float:
        return statistics.median(self.ga)

    @property
    def ga_beats_greedy(self) -> int:
        """Seeds whose plan is faster than the greedy one (by more than 0.1% of compute)."""
        return sum(g < self.greedy - 1e-3 for g in self.ga)


def swaps_by_kind(ops: list[Op], plan: Plan) -> dict[str, int]:
    """How many ops of each kind (the part of the name after the layer: "attn", "mlp") a plan swaps."""
    out: dict[str, int] = {}
    for o, s in zip(ops, plan.swap, strict=True):
        kind = o.name.split(".")[-1]
        out[kind] = out.get(kind, 0) + int(s)
    return out


def budget(shape: ModelShape, seq: int, batch: int, gpu_name: str, ratio: float) -> Machine:
    """A ``gpu_name`` whose room for layer activations is 1 / ``ratio`` of their no-offload peak."""
    if not ratio > 1:
        raise LabkitError(f"ratio must be greater than 1 (got {ratio!r})")
    resident = sum(model_state_bytes(shape.params, "bf16-mixed").values()) + activation_bytes_outside_layers(
        shape, seq, batch)
    ops = transformer_ops(shape, seq, batch, gpu(gpu_name).peak_flops["bf16"])
    free = machine(gpu_name, resident, capacity_bytes=1e30)
    peak = simulate_iteration(ops, free, Plan.none(len(ops))).peak_bytes - resident
    return machine(gpu_name, resident, capacity_bytes=resident + peak / ratio)


def sweep(shape: ModelShape, seq: int, batch: int, gpu_name: str = "RTX-4090", ratios: tuple[float, ...] = RATIOS,
          seeds: tuple[int, ...] = SEEDS, population: int = 10, generations: int = 15) -> list[Point]:
    """Slowdowns of the search (one per seed), the greedy rule and vDNN's at each oversubscription."""
    require_positive("population", population)
    if not seeds:
        raise LabkitError("seeds must hold at least one seed")
    ops = transformer_ops(shape, seq, batch, gpu(gpu_name).peak_flops["bf16"])
    base = compute_time(ops)
    out = []
    for r in ratios:
        m = budget(shape, seq, batch, gpu_name, r)

        def slow(x: swapadvisor.Scored) -> float:
            return x.result.time_s / base - 1 if x.fits else float("inf")

        runs = [swapadvisor.search(ops, m, seed=s, population=population, generations=generations) for s in seeds]
        greedy = swapadvisor.greedy(ops, m)
        out.append(Point(r, m.capacity_bytes, tuple(slow(x.best) for x in runs), slow(greedy), slow(runs[0].heuristic),
                         swaps_by_kind(ops, greedy.plan), tuple(swaps_by_kind(ops, x.best.plan) for x in runs)))
    return out
