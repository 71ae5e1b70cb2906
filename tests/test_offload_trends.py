"""Notebook 04's trend claims (labkit.offload.trends): each holds on figures shaped like the notebook's and fails
when the figure that the sentence rests on turns the other way. Cost: milliseconds (hand-made figures; the
notebook's own run, under load too, is `labkit bench --notebooks`).
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from labkit.errors import LabkitError
from labkit.offload import trends
from labkit.offload.flashneuron import Report
from labkit.offload.swap_sweep import Point

MLP, ATTN = {"attn": 2, "mlp": 5}, {"attn": 3, "mlp": 0}


def _points() -> list[Point]:
    def point(r: float, ga: tuple[float, ...], greedy: float) -> Point:
        return Point(r, 1e9, ga, greedy, 6.2, ATTN, (MLP, MLP, MLP, ATTN, MLP))

    return [point(1.05, (0.10, 0.15, 0.2, 0.3, 0.46), 0.38), point(1.1, (0.33, 0.35, 0.4, 0.45, 0.5), 0.59),
            point(2.0, (2.68, 2.7, 2.73, 2.75, 2.77), 3.04), point(3.0, (3.78, 3.9, 4.01, 4.05, 4.07), 4.07)]


def test_the_swap_planner_claims_hold_and_each_can_fail():
    points = _points()
    assert all(trends.swap_planners(points).values())
    broken = {
        "just over budget, the worst seed is slower than greedy": [replace(points[0], greedy=0.5), *points[1:]],
        "from 1.1x to 2x every seed beats greedy": [points[0], replace(points[1], greedy=0.4), *points[2:]],
        "greedy swaps attention ops only": [replace(points[0], greedy_swaps=MLP), *points[1:]],
        "vDNN's rule pays the same, highest price at every r": [replace(points[0], vdnn=6.0), *points[1:]],
        "at the largest r the search's median is within a few points of greedy":
            [*points[:-1], replace(points[-1], greedy=4.5)],
    }
    for claim, pts in broken.items():
        assert not trends.swap_planners(pts)[claim], claim


def test_vdnn_scaling_is_four_times_everything_and_a_wait():
    rows = {1: (1.0, 1.4, 0.22), 4: (4.0, 5.6, 0.88)}
    assert all(trends.vdnn_scaling(rows).values())
    held = trends.vdnn_scaling({1: (1.0, 1.4, 0.0), 4: (4.0, 5.6, 0.5)})
    assert not held["4x the batch: 4x the wait"] and not held["the A100 waits at every batch"]


def _report(slack: float, batch: int, overhead: float, throughput: float) -> Report:
    return Report("V100-32GB", 17.2, "direct", slack, 3, batch, 28.9, throughput, overhead, "paper")


def test_the_flashneuron_claims_hold_and_fail_when_the_rule_buys_a_batch():
    own = _report(0.1, 3, 0.0, 28.9)
    sweep = [own, _report(3.0, 4, 2.3, 8.8), _report(10.0, 6, 9.1, 2.9)]
    shares = {1024: 0.028, 1600: 0.041, 4096: 0.21}
    assert all(trends.flashneuron_rule(own, sweep, shares, 0.028, 0.028).values())
    bought = trends.flashneuron_rule(replace(own, batch_offload=4), sweep, {1024: 0.3, 1600: 0.2}, 0.3, 0.2)
    assert not any(bought[k] for k in ("at its own slack the rule buys no batch", "the share does not depend on the "
                                       "batch", "the share that hides grows with the width"))


def test_the_mobius_claims_read_the_paper_s_range_from_its_claim():
    first = {"zero_offload_gb": 272.0, "mobius_gb": 29.7}
    rows = [{"mobius_s": 1.06, "zero_offload_s": 4.46, "faster": "Mobius"},
            {"mobius_s": 2.89, "zero_offload_s": 4.50, "faster": "Mobius"},
            {"mobius_s": 8.89, "zero_offload_s": 8.15, "faster": "ZeRO"},
            {"mobius_s": 32.97, "zero_offload_s": 32.23, "faster": "ZeRO"}]
    assert all(trends.mobius_sweep(first, rows, "3.8-5.1x faster than prior offload systems").values())
    narrow = trends.mobius_sweep(first, rows, "4.5-5.1x faster")
    assert not narrow["at the smallest batch Mobius wins by a factor inside the paper's range"]
    with pytest.raises(LabkitError, match="claim must state a range"):
        trends.mobius_sweep(first, rows, "much faster")
