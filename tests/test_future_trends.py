"""Notebook 08's claims (``labkit.future.trends``): each holds on the notebook's kind of result and fails when the
table says otherwise. Replays and sweeps built from their dataclasses; the energy and near-data models are the real
ones (pure arithmetic). Cost: well under 1 s."""

from __future__ import annotations

from labkit.future import near_data, pim, trends
from labkit.future.crossbar import CrossbarConfig, LossPoint, LossSweep
from labkit.future.crossbar_study import SeedPoint, SeedSweep
from labkit.future.hierarchy import Replay


def _replay(policy: str, misses: int, stall_us: float) -> Replay:
    return Replay(policy, 600, 50, misses, (), (), 1e-3, stall_us * 1e-6, 2e-3, 100)


def _parts(lru: float = 2528, min_: float = 902, prefetch: float = 1979, both: float = 872) -> dict[str, Replay]:
    return {"lru": _replay("lru", 317, lru), "min": _replay("min", 235, min_),
            "lru+prefetch": _replay("lru+prefetch", 317, prefetch), "trace-aware": _replay("trace-aware", 235, both)}


def test_hierarchy_claims_hold_on_the_notebooks_figures_and_fail_when_prefetch_beats_min():
    by = {1.0: (_replay("lru", 0, 0), _replay("trace-aware", 0, 0)),
          0.5: (_replay("lru", 317, 2528), _replay("trace-aware", 235, 872))}
    assert all(trends.hierarchy(by, _parts()).values())
    worse = trends.hierarchy({0.5: (_replay("lru", 317, 2528), _replay("trace-aware", 400, 3000))},
                             _parts(min_=2000, prefetch=900, both=500))
    assert [k for k, v in worse.items() if v] == ["MIN misses less than LRU; prefetching alone leaves LRU's misses"]


def test_near_data_and_energy_claims_on_the_real_models():
    assert all(trends.near_data(near_data.adam_paths(7_000_000_000)).values())
    assert not trends.near_data(near_data.adam_paths(7_000_000_000), dram_over_hbm=100)[
        "the step in DRAM over 100x the joules of the step in HBM"]
    e = pim.mvm_energy(128, 128)
    assert all(trends.energy(e, {"a": 1.95, "b": 0.33}).values())
    assert not any(list(trends.energy(e, {"a": 1.1, "b": 1.2}).values())[2:])


def test_crossbar_claims_need_a_falling_adc_gap_and_a_mean_that_outgrows_its_spread():
    adc = LossSweep("adc_bits", CrossbarConfig(), 1.97, tuple(LossPoint(b, 1.97 + g, 1.97) for b, g in
                                                              ((2, 1.96), (4, 0.17), (6, 0.0012), (None, 0.0))))
    noise = SeedSweep("noise", (0, 1), 1.97, (SeedPoint(0.02, (0.0001, 0.0029)), SeedPoint(0.1, (0.0168, 0.0322)),
                                              SeedPoint(0.2, (0.0898, 0.1337))))
    assert all(trends.crossbar(adc, noise).values())
    flat = SeedSweep("noise", (0, 1), 1.97, (SeedPoint(0.02, (0.01, 0.012)), SeedPoint(0.1, (0.0, 0.05))))
    got = trends.crossbar(adc, flat)
    assert not got["at the smallest noise the seeds spread as widely as their mean"]
    assert not got["and the mean gap grows faster"]
