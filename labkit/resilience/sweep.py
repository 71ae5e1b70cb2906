"""Goodput against checkpoint interval: a fine grid, several seeds, and how flat the optimum is.

A grid built from multiples of Young's interval would contain Young's interval by construction,
so "the best simulated interval equals Young's" would prove nothing. This grid is uniform in
minutes, chosen without the formula; every interval is simulated (``interval.simulate``) with
several seeds, each seed a batch of jobs, so every point has a mean and a spread across seeds.
The lesson the data support: the goodput curve is flat near its optimum (waste is C/tau + tau/2M
to first order, whose minimum is quadratic), so every interval whose mean lies within the seeds'
spread of the best is as good as the best, and Young's and Daly's formulas land in that plateau.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from matplotlib.figure import Figure

from labkit.errors import LabkitError, require_positive
from labkit.predict.tables import text_table
from labkit.resilience.interval import daly_interval, goodput_first_order, simulate, young_interval
from labkit.teach import plots


@dataclass(frozen=True)
class SweepPoint:
    """One interval: simulated goodput over seeds (mean and spread) beside Daly's and Young's models."""

    interval_s: float
    goodput: float  # mean over seeds of each seed's goodput
    spread: float  # standard deviation across seeds
    daly_goodput: float
    first_order_goodput: float
    failures_per_job: float
    lost_s_per_failure: float


@dataclass(frozen=True)
class Sweep:
    """Goodput against interval: simulated beside both formulas, where it peaks and how flat it is."""

    points: tuple[SweepPoint, ...]
    young_s: float
    daly_s: float
    seeds: int
    trials: int

    @property
    def best(self) -> SweepPoint:
        """The grid point with the highest mean simulated goodput."""
        return max(self.points, key=lambda p: p.goodput)

    def plateau(self, width: float = 2.0) -> tuple[float, float]:
        """(shortest, longest) interval whose mean goodput is within ``width`` spreads of the best."""
        best = self.best
        near = [p.interval_s for p in self.points if p.goodput >= best.goodput - width * max(best.spread, p.spread)]
        return min(near), max(near)

    def within(self, tolerance: float = 0.01) -> tuple[float, float]:
        """(shortest, longest) interval whose mean goodput is at most ``tolerance`` (of all time) below the best."""
        near = [p.interval_s for p in self.points if p.goodput >= self.best.goodput - tolerance]
        return min(near), max(near)

    def goodput_at(self, interval_s: float) -> float:
        """Simulated mean goodput interpolated at ``interval_s`` (e.g. Young's, which the grid need not hold)."""
        xs = [p.interval_s for p in self.points]
        if not xs[0] <= interval_s <= xs[-1]:
            raise LabkitError(f"interval_s must lie within the sweep, {xs[0]:g} to {xs[-1]:g} s (got {interval_s:g})")
        return float(np.interp(interval_s, xs, [p.goodput for p in self.points]))

    def table(self, every: int = 1) -> str:
        rows = [[f"{p.interval_s / 60:.0f}", f"{p.goodput:.4f}", f"{p.spread:.4f}", f"{p.daly_goodput:.4f}",
                 f"{p.first_order_goodput:.4f}", f"{p.failures_per_job:.1f}", f"{p.lost_s_per_failure:.0f}"]
                for p in self.points[::every]]
        heads = ["interval, min", "simulated", "± sd (seeds)", "Daly", "first order", "failures/job",
                 "lost s/failure"]
        return text_table(heads, rows)


def sweep(work_s: float, checkpoint_s: float, restart_s: float, mtbf_s: float, intervals_s: Sequence[float], *,
          seeds: int = 5, trials: int = 80, first_seed: int = 0, **options) -> Sweep:
    """Simulate every interval of ``intervals_s`` with ``seeds`` seeds of ``trials`` jobs each.

    Seed k is the same for every interval (common random numbers), so differences between
    neighbouring intervals are not noise of different draws; the spread across seeds is what a
    different set of failures would change.
    """
    require_positive("seeds", seeds)
    require_positive("trials", trials)
    grid = sorted(intervals_s)
    if not grid:
        raise LabkitError("intervals_s must be a non-empty list of positive numbers of seconds (got [])")
    points = []
    for tau in grid:
        runs = [simulate(work_s, tau, checkpoint_s, restart_s, mtbf_s, trials=trials, seed=first_seed + k, **options)
                for k in range(seeds)]
        g = np.array([r.goodput for r in runs])
        points.append(SweepPoint(
            tau, float(g.mean()), float(g.std(ddof=1)) if seeds > 1 else 0.0, runs[0].daly_goodput,
            goodput_first_order(tau, checkpoint_s, restart_s, mtbf_s),
            float(np.mean([r.failures_per_trial for r in runs])),
            float(np.mean([r.lost_s_per_failure for r in runs]))))
    return Sweep(tuple(points), young_interval(checkpoint_s, mtbf_s), daly_interval(checkpoint_s, mtbf_s),
                 seeds, trials)


def minute_grid(first_min: int = 1, last_min: int = 30) -> tuple[float, ...]:
    """Every whole minute from ``first_min`` to ``last_min``, in seconds: a grid that knows no formula."""
    require_positive("first_min", first_min)
    if last_min <= first_min:
        raise LabkitError(f"last_min must be greater than first_min={first_min} (got {last_min})")
    return tuple(60.0 * m for m in range(first_min, last_min + 1))


def sweep_figure(sw: Sweep, title: str = "Goodput against checkpoint interval") -> Figure:
    """Simulated mean ± sd over seeds as error bars, Daly's model as a line, Young and Daly marked."""
    x = [p.interval_s / 60 for p in sw.points]
    fig = plots.line({"Daly (model)": [p.daly_goodput for p in sw.points]}, "interval, minutes",
                     "goodput (useful fraction of time)", title, x=x)
    ax = fig.axes[0]
    ax.errorbar(x, [p.goodput for p in sw.points], yerr=[p.spread for p in sw.points], fmt="s", markersize=3,
                capsize=2, color="black", label=f"simulated (mean ± sd, {sw.seeds} seeds)")
    lo, hi = sw.plateau()
    ax.axvspan(lo / 60, hi / 60, color="tab:green", alpha=0.12, label="within 2 sd of the best")
    ax.axvline(sw.young_s / 60, color="tab:red", linestyle="--", linewidth=1, label="Young")
    ax.axvline(sw.daly_s / 60, color="tab:purple", linestyle=":", linewidth=1, label="Daly")
    ax.legend(frameon=False, fontsize=7)
    return fig
