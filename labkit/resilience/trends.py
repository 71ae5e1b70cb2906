"""What notebook 06's text claims of its tables, each True or False: the notebook asserts them (issue 40).

Each function reads results the notebook already holds and returns ``{claim: held}``. The kill sweep, the
interval sweeps, the cluster plans and the redundancy simulator are deterministic, so their claims hold on any
machine; the checkpoint stalls are wall clock, so ``labkit bench --notebooks`` also runs :func:`save_cost`'s claims
with busy processes competing (``labkit.bench.studies_under_load``): a claim that stops holding under load shows
there as a ``NO``. Each claim is put with a margin the quiet and the loaded runs both clear by a factor of several
(stalls: the median of three saves each, ``save_cost.save_costs``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from labkit.resilience.cluster import ClusterRow
from labkit.resilience.crash import Sweep as KillSweep
from labkit.resilience.save_cost import SaveCostRow
from labkit.resilience.sweep import Sweep

FEW_MB = 1e6  # "from a few MB up": the rows the stall claims are made of
FIXED_COST_X = 3.0  # the smallest state's stall over bytes over bandwidth: quiet about 30x, two busy processes 70x


def kills(sweep: KillSweep, every: int) -> dict[str, bool]:
    """Section 2: a kill in a step loses under one interval; one while writing loses a whole one, its checkpoint
    rejected (the run falls back to the one before); every resumed run ends bit-identical."""
    step = [o for o in sweep.outcomes if o.kill.phase == "step"]
    write = [o for o in sweep.outcomes if o.kill.phase != "step"]
    return {"a kill during a step loses fewer steps than the interval": all(o.steps_lost < every for o in step),
            "a kill while writing loses the whole interval, its checkpoint rejected":
                bool(write) and all(o.steps_lost == every and len(o.rejected) == 1 for o in write),
            "every resumed run bit-identical to one never killed": sweep.all_ok}


def save_cost(rows: Sequence[SaveCostRow]) -> dict[str, bool]:
    """Section 4 (wall clock): a fixed cost dominates the smallest state; from a few MB the sync stall grows with
    the bytes and the async stall stays below it."""
    big = [r for r in rows if r.state_bytes >= FEW_MB]
    small = min(rows, key=lambda r: r.state_bytes)
    return {f"the smallest state's sync stall over {FIXED_COST_X:g}x bytes over bandwidth":
                small.sync_s > FIXED_COST_X * small.predicted_sync_s,
            "from a few MB the sync stall grows with the bytes":
                len(big) > 1 and all(a.sync_s < b.sync_s for a, b in zip(big, big[1:], strict=False)),
            "from a few MB the async stall below the sync stall": bool(big) and all(r.async_stall_s < r.sync_s
                                                                                   for r in big)}


def interval(sw: Sweep, weibull: Sweep) -> dict[str, bool]:
    """Section 6: a flat optimum with both formulas on it; a factor of two costs a few points, the grid's ends
    far more; clustered (Weibull) failures leave the higher goodput at the same mean time between failures."""
    lo, hi = sw.plateau()
    best = sw.best.goodput
    off_by_two = max(best - sw.goodput_at(sw.young_s / 2), best - sw.goodput_at(2 * sw.young_s))
    ends = min(best - sw.points[0].goodput, best - sw.points[-1].goodput)
    return {"Young's and Daly's intervals within 2 sd of the best": lo <= sw.young_s <= hi and lo <= sw.daly_s <= hi,
            "half or twice Young's interval costs under 5 points": off_by_two < 0.05,
            "each end of the grid costs over twice that": ends > 2 * off_by_two,
            "Weibull failures leave the higher goodput at Young's interval":
                weibull.goodput_at(weibull.young_s) > sw.goodput_at(sw.young_s)}


def plans(local: Sequence[ClusterRow], peer: Sequence[ClusterRow]) -> dict[str, bool]:
    """Section 7: the copy to a peer is faster than the local drive at every size, so goodput rises; the restart
    hardly changes (within 2%, the assumed overhead dominates)."""
    pairs = list(zip(local, peer, strict=True))
    return {"the peer copy's C below the local drive's": all(p.checkpoint_s < n.checkpoint_s for n, p in pairs),
            "so its goodput is higher at every size": all(p.goodput_daly > n.goodput_daly for n, p in pairs),
            "R within 2% of the local plan's": all(abs(p.restart_s / n.restart_s - 1) < 0.02 for n, p in pairs)}


def redundancy(cases: Mapping[tuple[int, int], tuple[float, float, float]]) -> dict[str, bool]:
    """Section 8, ``{(p, m): (bubble capacity, eager overhead, in-bubbles overhead)}``: below capacity 1 the step
    grows; above it, it can be free, and not always; placing into the bubbles never costs more than eager."""
    short = [v for v in cases.values() if v[0] < 1]
    roomy = [v for v in cases.values() if v[0] >= 1]
    return {"below capacity 1 redundant forwards cost step time": bool(short) and all(v[2] > 1e-9 for v in short),
            "at capacity 1 or more some cases are free and some are not":
                any(abs(v[2]) < 1e-9 for v in roomy) and any(v[2] > 1e-9 for v in roomy),
            "in the bubbles never costs more than eager": all(v[2] <= v[1] + 1e-9 for v in cases.values())}
