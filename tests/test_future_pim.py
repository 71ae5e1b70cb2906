"""PIM headline results as data with sources, the crossbar energy model, and the lab's view of each result."""

from __future__ import annotations

import pytest

from labkit.errors import LabkitError
from labkit.future.pim import adc_pj, model_views, mvm_energy, pim_result, pim_results
from labkit.references import section


def test_every_result_has_a_source_a_year_and_a_model():
    results = pim_results()
    assert {r.system for r in results} == {"HBM-PIM", "UPMEM", "PRIME", "ISAAC"}
    for r in results:
        assert r.source.strip() and 2000 <= r.year <= 2030 and r.claim and r.on_what
        assert r.model.get("kind") in ("roofline", "crossbar-energy")
        for key in r.model:
            if key.endswith(("_gbps", "_tflops")):  # every model figure says where it comes from
                assert r.model[key.rsplit("_", 1)[0] + "_source"].strip(), (r.system, key)
        if r.model["kind"] == "crossbar-energy":
            assert r.model["design_source"].strip()


def test_crossbar_energy_adds_up_and_uses_horowitz():
    pj = section("energy_pj")
    e = mvm_energy(128, 128, adc_bits=8)
    assert e.dram_j == pytest.approx(128 * 128 * pj["dram_read_32bit"] * 1e-12)
    assert e.mac_j == pytest.approx(128 * 128 * (pj["fp32_multiply"] + pj["fp32_add"]) * 1e-12)
    assert e.crossbar_j == pytest.approx(e.adc_j + e.array_j + e.periphery_j)
    assert e.conversions == 128 and e.ratio("dram") > e.ratio("sram") > 1
    assert mvm_energy(300, 128, rows=128).conversions == 3 * 128  # three row tiles, each converted
    assert adc_pj(10) == pytest.approx(4 * adc_pj(8))  # Walden: x2 per bit
    assert mvm_energy(128, 128, adc_bits=12).adc_j > mvm_energy(128, 128, adc_bits=4).adc_j
    assert mvm_energy(128, 128).rows() == mvm_energy(128, 128).rows()


def test_bit_serial_and_sliced_weights_cost_more_conversions():
    one = mvm_energy(256, 256)
    isaac = mvm_energy(256, 256, input_cycles=16, cells_per_weight=8)
    assert isaac.conversions == 128 * one.conversions and isaac.crossbar_j > 50 * one.crossbar_j


def test_model_views_sit_beside_the_reported_figures():
    views = {v.system: v for v in model_views()}
    assert views["HBM-PIM"].metric == "speedup" and views["HBM-PIM"].modelled_x == pytest.approx(1200 / 307.2, rel=1e-3)
    assert views["UPMEM"].modelled_x > 1
    assert views["PRIME"].modelled_x > views["ISAAC"].modelled_x > 1  # DRAM-fed baseline loses far more
    assert all(len(v.row()) == 5 for v in views.values())


def test_bad_input_names_the_field():
    with pytest.raises(LabkitError, match="system must be one of HBM-PIM"):
        pim_result("TPU")
    with pytest.raises(LabkitError, match="adc_bits must be an integer from 1 to 16"):
        adc_pj(0)
    with pytest.raises(LabkitError, match="rows must be a positive integer"):
        mvm_energy(10, 10, rows=0)
    with pytest.raises(LabkitError, match="baseline must be one of dram, sram"):
        mvm_energy(10, 10).digital_j("hdd")
    with pytest.raises(LabkitError, match="cannot be read"):
        pim_results("/nonexistent/pim.toml")


def test_int8_digital_baseline():
    from labkit.future.pim import mvm_energy

    e = mvm_energy(128, 128)
    weights = 128 * 128
    assert e.int8_mac_j == pytest.approx(weights * (0.2 + 0.1) * 1e-12)  # Horowitz: int8 multiply, int32 add
    assert e.digital_j("dram", "int8") == pytest.approx(e.dram_j / 4 + e.int8_mac_j)
    assert e.ratio("sram", "int8") < e.ratio("sram") and e.ratio("dram", "int8") < e.ratio("dram")
    assert e.ratio("sram", "int8") > 1  # the crossbar still wins, by less
    with pytest.raises(LabkitError, match="precision must be one of fp32, int8"):
        e.digital_j("dram", "fp8")
