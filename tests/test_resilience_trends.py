"""Notebook 06's claims (``labkit.resilience.trends``): each holds on results shaped like the notebook's and fails
when the table under it says otherwise. Built from the result dataclasses, no process or save: well under 1 s."""

from __future__ import annotations

import pytest

from labkit.errors import LabkitError
from labkit.resilience import trends
from labkit.resilience.cluster import ClusterRow
from labkit.resilience.crash import CrashOutcome, CrashTiming, KillPoint
from labkit.resilience.crash import Sweep as KillSweep
from labkit.resilience.save_cost import SaveCostRow, measure_bandwidths
from labkit.resilience.sweep import Sweep, SweepPoint


def _kill(step: int, phase: str, lost: int, rejected: int = 0, ok: bool = True) -> CrashOutcome:
    return CrashOutcome(KillPoint(step, phase), True, step - lost, lost, (("x", "y"),) * rejected, ok, ok, ok, True)


def test_kills_hold_on_the_notebooks_pattern_and_fail_on_a_write_kill_that_loses_less():
    good = (_kill(3, "step", 1), _kill(4, "written", 2, 1), _kill(6, "manifest", 2, 1))
    assert all(trends.kills(KillSweep(good, (CrashTiming(0.0, 0.0),) * 3), every=2).values())
    bad = trends.kills(KillSweep((_kill(3, "step", 2), _kill(4, "written", 0, 0)), (CrashTiming(0, 0),) * 2), 2)
    assert not any(list(bad.values())[:2])


def _row(mb: float, sync_ms: float, async_ms: float, predicted_ms: float = 0.1) -> SaveCostRow:
    return SaveCostRow(int(mb * 1e6), int(mb * 1e6), sync_ms / 1e3, predicted_ms / 1e3, async_ms / 1e3, 0.0, 0.0)


def test_save_cost_claims_on_a_quiet_and_a_loaded_table_and_against_an_inverted_one():
    quiet = [_row(0.1, 13, 6, 0.4), _row(6.4, 26, 5), _row(25.4, 62, 19), _row(101.1, 197, 50)]
    loaded = [_row(0.1, 70, 3, 1), _row(6.4, 125, 8), _row(25.4, 192, 37), _row(101.1, 711, 121)]
    assert all(trends.save_cost(quiet).values()) and all(trends.save_cost(loaded).values())
    inverted = [_row(0.1, 1, 6, 0.4), _row(6.4, 90, 95), _row(25.4, 62, 19)]
    assert not any(trends.save_cost(inverted).values())


def test_the_probe_takes_the_median_of_its_rounds(tmp_path):
    assert measure_bandwidths(tmp_path, 1 << 16, repeats=3).copy > 0
    with pytest.raises(LabkitError, match="repeats"):
        measure_bandwidths(tmp_path, 1 << 16, repeats=0)


def _sweep(goodputs: list[float], young_min: float, spread: float = 0.001) -> Sweep:
    pts = tuple(SweepPoint(60.0 * (i + 1), g, spread, g, g, 0.0, 0.0) for i, g in enumerate(goodputs))
    return Sweep(pts, 60.0 * young_min, 60.0 * young_min, 5, 80)


def test_interval_claims_need_a_flat_top_with_the_formulas_on_it():
    flat = [0.60, 0.78, 0.80, 0.815, 0.82, 0.818, 0.815, 0.81, 0.805, 0.80, 0.75, 0.70]
    assert all(trends.interval(_sweep(flat, 5), _sweep([g + 0.01 for g in flat], 5)).values())
    off = trends.interval(_sweep(flat, 4), _sweep([g - 0.01 for g in flat], 4))
    assert not off["Young's and Daly's intervals within 2 sd of the best"]
    assert not off["Weibull failures leave the higher goodput at Young's interval"]


def _plan(c: float, r: float, goodput: float) -> ClusterRow:
    return ClusterRow(1024, 3600.0, c, r, 600.0, 600.0, goodput, goodput)


def test_plan_and_redundancy_claims():
    local, peer = [_plan(6.4, 606, 0.98)], [_plan(0.9, 601, 0.99)]
    assert all(trends.plans(local, peer).values())
    assert not trends.plans(peer, local)["so its goodput is higher at every size"]
    cases = {(4, 4): (2.25, 0.19, 0.0), (4, 8): (1.12, 0.24, 0.03), (4, 16): (0.56, 0.28, 0.158)}
    assert all(trends.redundancy(cases).values())
    assert not trends.redundancy({(4, 16): (0.56, 0.28, 0.0), (4, 4): (2.25, 0.1, 0.2)})[
        "below capacity 1 redundant forwards cost step time"]
