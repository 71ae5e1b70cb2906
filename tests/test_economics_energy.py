"""Energy of a step: the parts add up, units convert, and more bytes never cost fewer joules."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from labkit import hardware
from labkit.economics import energy, grid
from labkit.errors import LabkitError

RATES = energy.rates("H100-SXM")
TRAFFIC = energy.StepTraffic(gpus=8, hosts=1, busy_s=10.0, stall_s=2.0, host_busy_s=3.0, hbm_bytes=5e12,
                             pcie_bytes=4e10, peer_bytes=6e10, dram_bytes=3e11, ssd_read_bytes=2e11,
                             ssd_write_bytes=1e11)


def test_step_energy_is_the_sum_of_its_parts_by_hand():
    e = energy.step_energy(TRAFFIC, RATES)
    assert set(e.parts_j) == set(energy.PARTS)
    assert e.total_j == pytest.approx(sum(e.parts_j.values()), rel=1e-12)
    hbm = 5e12 * 8 * 4e-12  # catalogue: 4 pJ/bit
    assert e.parts_j["hbm"] == pytest.approx(hbm)
    assert e.parts_j["compute"] == pytest.approx(8 * 700 * 10.0 - hbm)  # board energy less its HBM
    assert e.parts_j["compute"] + e.parts_j["hbm"] == pytest.approx(8 * 700 * 10.0)
    assert e.parts_j["gpu_idle"] == pytest.approx(8 * 700 * 0.1 * 2.0)
    assert e.parts_j["link"] == pytest.approx(4e10 * 8 * 6.5e-12 + 6e10 * 8 * 1.3e-12)
    host_w = 2 * 350
    assert e.parts_j["host"] == pytest.approx(host_w * (0.1 * 12.0 + 0.9 * 3.0))
    ddr5 = hardware.tier("DDR5-4800")
    assert e.parts_j["dram"] == pytest.approx(3e11 * ddr5.power_watts / ddr5.read_bandwidth)
    nvme = hardware.tier("NVMe-PCIe4")
    assert nvme.power_watts == 7 and nvme.read_bandwidth == 7.45e9 and nvme.write_bandwidth == 6.9e9
    assert e.parts_j["ssd"] == pytest.approx(2e11 * 7 / 7.45e9 + 1e11 * 7 / 6.9e9)


def test_units_joules_kwh_and_pue():
    e = energy.Energy({"a": 3.6e6, "b": 7.2e6})
    assert e.total_j == 1.08e7 and e.kwh == pytest.approx(3.0)
    assert grid.joules_to_kwh(3.6e6) == 1.0 and grid.kwh_to_joules(2.0) == 7.2e6
    assert e.facility_j(1.5) == pytest.approx(1.62e7)
    assert e.scaled(10).total_j == pytest.approx(1.08e8)
    assert e.scaled(10).parts_j["a"] == pytest.approx(3.6e7)
    with pytest.raises(LabkitError, match="pue must be at least 1"):
        e.facility_j(0.9)
    assert grid.carbon_kg(3.6e6 * 1000, 500) == pytest.approx(500.0)  # 1 MWh at 500 g/kWh = 500 kg


def test_dram_energy_from_the_catalogue_agrees_with_han_et_al():
    """Active power / bandwidth of DDR5 (catalogue) against Han et al.'s 640 pJ per 32-bit DRAM read."""
    per_bit = energy.tier_j_per_bit(hardware.tier("DDR5-4800"))
    assert per_bit == pytest.approx(640e-12 / 32, rel=0.1)
    assert energy.dram_read_over_fma() == pytest.approx(640 / 4.6)
    assert energy.han_pj()["fp32_multiply"] == 3.7


def test_average_power_and_movement():
    assert energy.average_power_w(700, 1.0) == 700
    assert energy.average_power_w(700, 0.0) == pytest.approx(70)
    assert energy.average_power_w(700, 0.5, idle_fraction=0.0) == 350
    assert energy.movement_j(1e9, 1e-12) == pytest.approx(8e-3)


@pytest.mark.parametrize("call, message", [
    (lambda: energy.average_power_w(700, 1.5), "busy_fraction must be between 0 and 1"),
    (lambda: energy.movement_j(-1, 1e-12), "nbytes must be a non-negative number"),
    (lambda: energy.tier_j_per_bit(hardware.tier("ssd"), "sideways"), "direction must be one of read, write"),
    (lambda: energy.gpu_memory_j_per_bit(hardware.gpu("RTX-4090")), "gpu must be one with memory_energy"),
    (lambda: energy.link_j_per_bit(hardware.link("ib-ndr")), "link must be one with energy_pj_per_bit"),
    (lambda: energy.rates("H100-SXM", dram="NVMe-PCIe4"), "dram must be one of DDR4-3200, DDR5-4800"),
    (lambda: energy.step_energy(dataclasses.replace(TRAFFIC, hbm_bytes=1e18), RATES), "hbm_bytes imply"),
    (lambda: energy.step_energy(dataclasses.replace(TRAFFIC, host_busy_s=99.0), RATES), "host_busy_s must be"),
    (lambda: energy.step_energy(dataclasses.replace(TRAFFIC, ssd_write_bytes=-1.0), RATES), "ssd_write_bytes"),
])  # fmt: skip
def test_bad_input_names_the_field(call, message):
    with pytest.raises(LabkitError, match=message):
        call()


FIELDS = ("pcie_bytes", "peer_bytes", "dram_bytes", "ssd_read_bytes", "ssd_write_bytes", "stall_s", "hbm_bytes")


@settings(max_examples=60, deadline=None)
@given(field=st.sampled_from(FIELDS), base=st.floats(0, 1e12), extra=st.floats(1e3, 1e12))
def test_more_bytes_or_stalls_never_cost_less_and_the_sum_holds(field, base, extra):
    low = dataclasses.replace(TRAFFIC, **{field: base})
    high = dataclasses.replace(TRAFFIC, **{field: base + extra})
    e_low, e_high = energy.step_energy(low, RATES), energy.step_energy(high, RATES)
    assert all(v >= 0 for v in e_high.parts_j.values())
    assert e_high.total_j == pytest.approx(sum(e_high.parts_j.values()), rel=1e-12)
    if field == "hbm_bytes":  # moves joules from compute to hbm: the board total is unchanged
        assert e_high.total_j == pytest.approx(e_low.total_j, rel=1e-12)
        assert e_high.parts_j["hbm"] > e_low.parts_j["hbm"]
    else:
        assert e_high.total_j > e_low.total_j
