"""Choosing the checkpoint interval: Young's and Daly's formulas beside a seeded Monte Carlo of a failing job."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from labkit import hardware
from labkit.errors import LabkitError
from labkit.references import failure_traces
from labkit.resilience import cluster as cl
from labkit.resilience import interval as iv
from labkit.resilience import sweep as sp

M, C, R = 3600.0, 36.0, 180.0  # one failure an hour, a 36 s write, a 3 min restart
WORK = 100 * M  # about 120 failures per simulated job


def test_young_and_daly_by_hand():
    assert iv.young_interval(18.0, 3600.0) == pytest.approx(360.0)  # sqrt(2 * 18 * 3600)
    x = C / (2 * M)
    assert iv.daly_interval(C, M) == pytest.approx(math.sqrt(2 * C * M) * (1 + math.sqrt(x) / 3 + x / 9) - C)
    # sqrt(2CM) * sqrt(C/2M) = C, so Daly = Young - 2C/3 + C*sqrt(x)/9
    assert iv.daly_interval(C, M) == pytest.approx(iv.young_interval(C, M) - 2 * C / 3 + C * math.sqrt(x) / 9)
    assert iv.daly_interval(3 * M, M) == M  # C >= 2M: checkpoint once per MTBF


def test_goodput_models_by_hand():
    tau = 360.0
    assert iv.goodput_first_order(tau, C, R, M) == pytest.approx(1 - C / tau - (tau / 2 + R) / M)
    daly = tau / (M * math.exp(R / M) * (math.exp((tau + C) / M) - 1))
    assert iv.goodput_daly(tau, C, R, M) == pytest.approx(daly)
    assert iv.goodput_first_order(10 * M, C, R, M) == 0.0  # clipped, never negative


def test_daly_interval_is_the_optimum_of_daly_goodput():
    taus = np.geomspace(0.2, 5, 4001) * iv.young_interval(C, M)
    best = taus[np.argmax([iv.goodput_daly(t, C, 0.0, M) for t in taus])]
    assert best == pytest.approx(iv.daly_interval(C, M), rel=0.01)
    assert abs(best - iv.daly_interval(C, M)) < abs(best - iv.young_interval(C, M))


def test_cluster_mtbf_from_the_llama3_trace():
    llama = next(t for t in failure_traces() if t.name == "Llama 3")
    assert iv.cluster_mtbf_s(llama.rate_per_gpu_day, 16384) == pytest.approx(54 * 86400 / 419)
    assert iv.cluster_mtbf_s(llama.rate_per_gpu_day, 8192) == pytest.approx(2 * 54 * 86400 / 419)
    assert iv.cluster_mtbf_s(llama.rate_per_gpu_day, 1000) == pytest.approx(3600 * llama.mtbf_hours(1000))


def test_simulation_matches_daly_at_youngs_interval():
    tau = iv.young_interval(C, M)
    sim = iv.simulate(WORK, tau, C, R, M, trials=400, seed=1)
    assert sim.goodput == pytest.approx(iv.goodput_daly(tau, C, R, M), rel=0.01)
    assert sim.goodput == pytest.approx(iv.goodput_first_order(tau, C, R, M), rel=0.03)
    assert 0.7 < sim.goodput < 0.9  # a real loss: the test would fail if failures were ignored
    assert sim.failures_per_trial == pytest.approx(WORK / sim.goodput / M, rel=0.03)


def test_simulated_optimum_on_a_grid_that_knows_no_formula():
    sw = sp.sweep(WORK, C, R, M, sp.minute_grid(2, 20), seeds=3, trials=60, first_seed=2)
    assert [p.interval_s for p in sw.points] == [60.0 * m for m in range(2, 21)]
    lo, hi = sw.plateau()
    assert lo <= sw.young_s <= hi and lo <= sw.daly_s <= hi  # the formulas land in the plateau
    assert 1 / 1.5 <= sw.best.interval_s / sw.young_s <= 1.5
    near = sw.within(0.01)
    assert near[0] <= lo and near[1] >= hi and near[1] / near[0] >= 2  # flat: 1% of goodput spans 2x in interval
    ends = (sw.points[0].goodput, sw.points[-1].goodput)
    assert max(ends) < sw.best.goodput - 0.02  # a real optimum, not a flat line
    for p in sw.points:
        assert p.goodput == pytest.approx(p.daly_goodput, rel=0.01) and 0 < p.spread < 0.01
    assert sw.goodput_at(sw.young_s) == pytest.approx(iv.goodput_daly(sw.young_s, C, R, M), rel=0.01)
    assert "± sd" in sw.table() and sw.table() == sp.sweep(WORK, C, R, M, sp.minute_grid(2, 20), seeds=3,
                                                           trials=60, first_seed=2).table()
    assert len(sp.sweep_figure(sw).axes[0].lines) >= 3


def test_work_lost_per_failure_is_half_an_interval_plus_restart():
    tau = iv.young_interval(C, M)
    sim = iv.simulate(WORK, tau, C, R, M, trials=400, seed=3)
    assert sim.lost_work_s_per_failure == pytest.approx((tau + C) / 2, rel=0.1)
    assert sim.lost_s_per_failure == pytest.approx(tau / 2 + R, rel=0.1)
    assert sim.restart_s_per_failure <= R  # failed restarts cost less than a full one


def test_weibull_keeps_the_mean_and_the_seed_fixes_the_table():
    tau = iv.young_interval(C, M)
    weib = iv.simulate(WORK, tau, C, R, M, distribution="weibull", shape=0.7, trials=300, seed=4)
    assert weib.failures_per_trial == pytest.approx(WORK / weib.goodput / M, rel=0.05)  # mean gap = M
    assert weib == iv.simulate(WORK, tau, C, R, M, distribution="weibull", shape=0.7, trials=300, seed=4)
    assert weib != iv.simulate(WORK, tau, C, R, M, distribution="weibull", shape=0.7, trials=300, seed=5)


def test_checkpoint_cost_from_bytes_and_bandwidth():
    assert cl.checkpoint_bytes(1000) == 14_000  # 2 B weights + 12 B fp32 master and Adam moments
    params, drive = 405_000_000_000, hardware.tier("NVMe-PCIe4")
    rows = cl.cluster_intervals([1024, 4096, 16384], params, writers=128)
    c = 14 * params / (128 * drive.write_bandwidth)
    assert [r.checkpoint_s for r in rows] == pytest.approx([c] * 3)
    assert rows[0].restart_s == pytest.approx(600 + 14 * params / (128 * drive.read_bandwidth))
    assert [r.n_gpus for r in rows] == [1024, 4096, 16384]
    mtbfs, goodputs = [r.mtbf_s for r in rows], [r.goodput_daly for r in rows]
    assert mtbfs == sorted(mtbfs, reverse=True) and goodputs == sorted(goodputs, reverse=True)
    assert rows[2].failures_per_day == pytest.approx(419 / 54)
    assert all(r.goodput_daly >= r.goodput_young - 1e-12 for r in rows)
    peer = cl.cluster_intervals([16384], params, writers=128, target="peer", device="ib-ndr")[0]
    assert peer.checkpoint_s < rows[2].checkpoint_s and peer.goodput_daly > rows[2].goodput_daly
    assert "16,384" in cl.cluster_table(rows)


times = st.floats(min_value=1.0, max_value=1e6)


@settings(max_examples=200, deadline=None)
@given(tau=times, c=times, r=st.floats(min_value=0.0, max_value=1e6), m=times)
def test_goodput_is_a_fraction(tau, c, r, m):
    for model in (iv.goodput_daly, iv.goodput_first_order):
        assert 0.0 <= model(tau, c, r, m) <= 1.0


@settings(max_examples=200, deadline=None)
@given(tau=times, c=times, r=st.floats(min_value=0.0, max_value=1e5), m=times, more=st.floats(1.01, 100.0))
def test_goodput_falls_with_checkpoint_cost_and_rises_with_mtbf(tau, c, r, m, more):
    for model in (iv.goodput_daly, iv.goodput_first_order):
        assert model(tau, c * more, r, m) <= model(tau, c, r, m)
        assert model(tau, c, r, m * more) >= model(tau, c, r, m)


@given(c=times, m=times)
def test_daly_never_exceeds_young(c, m):
    assert 0 < iv.daly_interval(c, m) <= iv.young_interval(c, m) * (1 + 1e-12)


@pytest.mark.parametrize("call, message", [
    (lambda: iv.young_interval(0, M), "checkpoint_s must be a finite positive number"),
    (lambda: iv.daly_interval(C, -1.0), "mtbf_s must be a finite positive number"),
    (lambda: iv.goodput_daly(float("nan"), C, R, M), "interval_s must be"),
    (lambda: iv.goodput_first_order(60.0, C, -1, M), "restart_s must be a finite non-negative number"),
    (lambda: iv.cluster_mtbf_s(0.001, 0), "n_gpus must be a positive integer"),
    (lambda: iv.simulate(WORK, 60.0, C, R, M, distribution="gamma"), "distribution must be one of exponential"),
    (lambda: iv.simulate(WORK, 60.0, C, R, M, trials=0), "trials must be a positive integer"),
    (lambda: iv.simulate(WORK, 60.0, C, R, M, distribution="weibull", shape=0), "shape must be a positive"),
    (lambda: iv.simulate(1e9, 1.0, C, R, M), "work_s / interval_s must be at most"),
    (lambda: iv.simulate(WORK, 60.0, C, 50 * M, M), "mtbf_s=3600 is too short"),
    (lambda: sp.sweep(WORK, C, R, M, []), "intervals_s must be a non-empty list"),
    (lambda: sp.sweep(WORK, C, R, M, [60.0], seeds=0), "seeds must be a positive integer"),
    (lambda: sp.minute_grid(5, 5), "last_min must be greater than first_min=5"),
    (lambda: cl.cluster_intervals([8], 1000, trace="GPT-4"), "trace must be one of Llama 3, OPT-175B"),
    (lambda: cl.cluster_intervals([8], 1000, target="tape"), "target must be one of storage, peer"),
    (lambda: cl.cluster_intervals([8], 1000, device="floppy"), "tier must be one of .*NVMe-PCIe4"),
    (lambda: cl.cluster_intervals([8], 1000, writers=0), "writers must be a positive integer"),
    (lambda: cl.cluster_intervals([], 1000), "sizes must be a non-empty list"),
])  # fmt: skip
def test_bad_input_names_the_field(call, message):
    with pytest.raises(LabkitError, match=message):
        call()
