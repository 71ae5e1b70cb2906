"""What notebook 08's text claims of its tables, each True or False: the notebook asserts them (issue 40).

Every table of 08 is a deterministic replay or simulation (the trace's page replays, the seeded float64 crossbar,
the energy and roofline models), so these claims hold on a busy machine as on a quiet one; none is wall clock.
"""

from __future__ import annotations

from collections.abc import Mapping

from labkit.future.crossbar import LossSweep
from labkit.future.crossbar_study import SeedSweep
from labkit.future.hierarchy import Replay
from labkit.future.near_data import NearData
from labkit.future.pim import MvmEnergy

A_LITTLE = 0.05  # "only a little more on top of MIN": under 5 points of LRU's stall


def _removed(r: Replay, lru: Replay) -> float:
    return 1 - r.stall_s / lru.stall_s


def hierarchy(by_fraction: Mapping[float, tuple[Replay, Replay]], parts: Mapping[str, Replay]) -> dict[str, bool]:
    """Section 1: ``{HBM share: (LRU, trace-aware)}`` and the ablation's four policies at one share."""
    full = by_fraction.get(1.0)
    lru = parts["lru"]
    pairs = list(by_fraction.values())
    return {"with the whole working set in HBM nothing misses": full is not None and full[0].misses + full[1].misses
            == 0,
            "trace-aware never misses more than LRU, and stalls less wherever LRU stalls":
                all(a.misses <= b.misses and (b.stall_s == 0 or a.stall_s < b.stall_s) for b, a in pairs),
            "MIN misses less than LRU; prefetching alone leaves LRU's misses":
                parts["min"].misses < lru.misses == parts["lru+prefetch"].misses,
            "MIN alone removes over half of LRU's stall": _removed(parts["min"], lru) > 0.5,
            "prefetching alone removes some, less than MIN": 0 < _removed(parts["lru+prefetch"], lru)
                < _removed(parts["min"], lru),
            f"both together remove more than MIN alone, by under {100 * A_LITTLE:.0f} points":
                0 <= _removed(parts["trace-aware"], lru) - _removed(parts["min"], lru) < A_LITTLE}


def near_data(paths: NearData, dram_over_hbm: float = 3.0) -> dict[str, bool]:
    """Section 2: near-data is faster; energy moves less than time; the step in DRAM costs several times the
    joules of the same step in HBM (the two ``step`` legs)."""
    step = {p.name: next(leg for leg in p.legs if leg.what == "step") for p in (paths.standard, paths.near)}
    standard, near = paths.standard, paths.near
    return {"near-data is faster": paths.winner == "near-data",
            "energy moves less than time": standard.joules / near.joules < standard.seconds / near.seconds,
            f"the step in DRAM over {dram_over_hbm:g}x the joules of the step in HBM":
                step[near.name].joules > dram_over_hbm * step[standard.name].joules}


def crossbar(adc: LossSweep, noise: SeedSweep) -> dict[str, bool]:
    """Section 3: the gap falls as the ADC gets bits; at the smallest noise the seeds spread as widely as their
    mean; the spread grows with the noise and the mean grows faster."""
    gaps = [p.gap for p in adc.points if p.setting is not None]
    widths = [p.spread[1] - p.spread[0] for p in noise.points]
    means = [p.mean for p in noise.points]
    rising = all(a < b for a, b in zip(widths, widths[1:], strict=False))
    return {"the loss gap falls as the ADC gets more bits": all(a > b for a, b in zip(gaps, gaps[1:], strict=False)),
            "at the smallest noise the seeds spread as widely as their mean": widths[0] >= means[0],
            "the spread grows with the noise": rising,
            "and the mean gap grows faster": all(m1 / w1 < m2 / w2 for m1, w1, m2, w2 in
                                                 zip(means, widths, means[1:], widths[1:], strict=False))}


def energy(e: MvmEnergy, reported_over_model: Mapping[str, float]) -> dict[str, bool]:
    """Sections 4 and 5: the crossbar's own cost is mostly shift-add and rescale, not the ADC; int8 shrinks the
    saving; the papers and the model disagree everywhere (by over 25%), in both directions."""
    ratios = list(reported_over_model.values())
    return {"the crossbar's shift-add and rescale cost more than its ADC": e.periphery_j > e.adc_j,
            "against int8 the saving shrinks": all(e.ratio(b, "int8") < e.ratio(b) for b in ("sram", "dram")),
            "model and papers differ by over 25% on every system": all(abs(r - 1) > 0.25 for r in ratios),
            "in both directions": min(ratios) < 1 < max(ratios)}
