"""Three strategies costed over a whole run: GPU counts from memory, exposed transfers, monotone costs."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from labkit import hardware
from labkit.economics import grid, run, strategies
from labkit.errors import LabkitError
from labkit.shapes import model_shape

L7, L70 = model_shape("llama2-7b"), model_shape("llama2-70b")


@pytest.fixture(scope="module")
def runs70():
    return run.compare("llama2-70b", 2e12, "H100-SXM")


def test_offload_needs_fewer_gpus_and_each_fits(runs70):
    gpus = {s: r.gpus for s, r in runs70.items()}
    assert gpus["hbm"] > gpus["dram-offload"] > gpus["ssd-offload"] == 1
    usable = hardware.gpu("H100-SXM").memory_bytes * strategies.USABLE_FRACTION
    for r in runs70.values():
        assert r.plan.per_gpu_bytes <= usable
    hbm = runs70["hbm"].plan  # one GPU fewer would not hold 16 bytes per parameter plus activations
    assert 16 * L70.params / (hbm.gpus - 1) + hbm.per_gpu_bytes - 16 * L70.params / hbm.gpus > usable
    with pytest.raises(LabkitError, match=f"gpus must be at least {hbm.gpus} to hold llama2-70b with hbm"):
        strategies.plan("hbm", L70, "H100-SXM", gpus=hbm.gpus - 1)


def test_compute_time_is_flops_over_gpus_peak_and_mfu():
    p = strategies.plan("hbm", L7, "H100-SXM", gpus=8)
    from labkit.predict.estimate import training_flops

    flops = training_flops(L7, 4096, 1) * strategies.BATCH_TOKENS / 4096
    assert p.compute_s == pytest.approx(flops / (8 * 989.4e12 * 0.4))
    assert p.step_s == pytest.approx(p.compute_s) and p.stall_s == 0.0  # big batch: transfers hidden
    half = strategies.plan("hbm", L7, "H100-SXM", gpus=8, mfu=0.2)
    assert half.compute_s == pytest.approx(2 * p.compute_s)


def test_small_batches_expose_the_transfers():
    big = strategies.plan("ssd-offload", L7, "H100-SXM", gpus=8)
    small = strategies.plan("ssd-offload", L7, "H100-SXM", gpus=8, batch_tokens=32 * 4096)
    assert big.stall_s == 0.0 and small.stall_s > 0
    assert small.step_s == pytest.approx(max(small.compute_s, small.pcie_s, small.peer_s, small.cpu_s, small.nvme_s))
    serial = strategies.plan("ssd-offload", L7, "H100-SXM", gpus=8, batch_tokens=32 * 4096, overlap=False)
    assert serial.step_s > small.step_s
    dram = strategies.plan("dram-offload", L7, "H100-SXM", gpus=1, batch_tokens=4096)
    assert dram.pcie_s == pytest.approx(4 * L7.params / 64e9)  # 2 down + 2 up bytes per parameter


def test_run_totals_follow_from_the_step(runs70):
    r = runs70["ssd-offload"]
    assert r.steps == pytest.approx(2e12 / strategies.BATCH_TOKENS)
    assert r.time_s == pytest.approx(r.plan.step_s * r.steps)
    assert r.energy.total_j == pytest.approx(sum(r.energy.parts_j.values()))
    assert r.facility_kwh == pytest.approx(r.energy.kwh * grid.pue())
    assert r.kg_co2 == pytest.approx(r.facility_kwh * 481 / 1000)
    assert r.cloud_usd == pytest.approx(r.gpus * r.time_s / 3600 * hardware.gpu("H100-SXM").cloud_usd_per_hour)
    assert r.wear.bytes_written == pytest.approx(18 * L70.params * r.steps)  # ZeRO-Infinity, section 4.1
    assert r.wear.drive == "NVMe-U2-3.84TB" and r.wear.drives == 8  # a DGX H100's data drives
    assert r.wear.endurance_bytes_per_drive == 3840e9 * 365 * 5  # 1 drive write per day for 5 years
    assert runs70["hbm"].wear is None and runs70["hbm"].ssd_life_used == 0.0
    assert set(r.row()) >= {"days", "cloud_usd", "kg_co2", "ssd_life_used", "ssd_replacements"}


def test_where_each_wins(runs70):
    wins = run.winners(runs70)
    assert wins["days"] == ("hbm",) and wins["facility_kwh"] == ("hbm",)
    assert wins["gpus"] == ("ssd-offload",)
    assert wins["cloud_usd"] == strategies.STRATEGIES  # same GPU-hours when nothing stalls: a tie


def test_measured_traffic_is_a_parameter():
    measured = strategies.Traffic(link=4.0, nvme_read=30.0, nvme_write=24.0)
    default = run.cost_run("ssd-offload", "llama2-7b", 1e11, "H100-SXM")
    more = run.compare("llama2-7b", 1e11, "H100-SXM", traffic={"ssd-offload": measured})["ssd-offload"]
    assert more.wear.bytes_written == pytest.approx(default.wear.bytes_written * 24 / 18)
    assert more.energy.parts_j["ssd"] > default.energy.parts_j["ssd"]
    with pytest.raises(LabkitError, match="nvme_write bytes per parameter must be a non-negative number"):
        strategies.Traffic(link=4.0, nvme_read=1.0, nvme_write=-1.0)
    with pytest.raises(LabkitError, match="strategy must be one of hbm, dram-offload, ssd-offload"):
        run.compare("llama2-7b", 1e11, "H100-SXM", traffic={"disk": measured})


@pytest.mark.parametrize("kwargs, message", [
    ({"strategy": "tape"}, "strategy must be one of hbm, dram-offload, ssd-offload"),
    ({"tokens": 0}, "tokens must be a positive number"),
    ({"model": "gpt5"}, "model must be one of"),
    ({"gpu": "A200"}, "gpu must be one of"),
    ({"region": "mars"}, "region must be one of"),
    ({"pue": 0.5}, "pue must be a number >= 1"),
    ({"mfu": 1.5}, "mfu must be a number in"),
    ({"g_co2_per_kwh": -3.0}, "g_co2_per_kwh must be a non-negative number"),
    ({"usd_per_kwh": -1.0}, "usd_per_kwh must be a non-negative number"),
    ({"gpu": "RTX-4090"}, "gpu must be one with memory_energy_pj_per_bit"),
])  # fmt: skip
def test_bad_input_names_the_field(kwargs, message):
    args = {"strategy": "dram-offload", "model": "llama2-7b", "tokens": 1e11, "gpu": "H100-SXM"} | kwargs
    with pytest.raises(LabkitError, match=message):
        run.cost_run(args.pop("strategy"), args.pop("model"), args.pop("tokens"), args.pop("gpu"), **args)


COSTS = ("time_s", "cloud_usd", "owned_usd", "facility_kwh", "kg_co2")


@settings(max_examples=15, deadline=None)
@given(strategy=st.sampled_from(strategies.STRATEGIES), tokens=st.floats(1e9, 1e12), more=st.floats(1.01, 10))
def test_more_tokens_cost_more_of_everything(strategy, tokens, more):
    a = run.cost_run(strategy, "llama2-7b", tokens, "H100-SXM")
    b = run.cost_run(strategy, "llama2-7b", tokens * more, "H100-SXM")
    for metric in COSTS:
        assert getattr(b, metric) > getattr(a, metric), metric
    assert b.ssd_life_used >= a.ssd_life_used


@settings(max_examples=15, deadline=None)
@given(strategy=st.sampled_from(strategies.STRATEGIES), g=st.floats(1, 1000), price=st.floats(0.01, 1),
       factor=st.floats(1.01, 5))
def test_cleaner_grid_less_carbon_dearer_power_more_dollars(strategy, g, price, factor):
    base = run.cost_run(strategy, "llama2-7b", 1e11, "H100-SXM", g_co2_per_kwh=g, usd_per_kwh=price)
    clean = run.cost_run(strategy, "llama2-7b", 1e11, "H100-SXM", g_co2_per_kwh=g / factor, usd_per_kwh=price)
    dear = run.cost_run(strategy, "llama2-7b", 1e11, "H100-SXM", g_co2_per_kwh=g, usd_per_kwh=price * factor)
    hourly = hardware.gpu("H100-SXM").cloud_usd_per_hour
    rent = run.cost_run(strategy, "llama2-7b", 1e11, "H100-SXM", g_co2_per_kwh=g, usd_per_kwh=price,
                        cloud_usd_per_hour=hourly * factor)
    assert clean.kg_co2 < base.kg_co2 and clean.facility_kwh == pytest.approx(base.facility_kwh)
    assert dear.owned_usd > base.owned_usd and rent.cloud_usd > base.cloud_usd


@settings(max_examples=15, deadline=None)
@given(write=st.floats(1, 64), more=st.floats(0.5, 64))
def test_more_bytes_written_per_step_wear_the_ssds_more(write, more):
    def wear_of(w):
        t = dataclasses.replace(strategies.DEFAULT_TRAFFIC["ssd-offload"], nvme_write=w)
        return run.cost_run("ssd-offload", "llama2-7b", 1e11, "H100-SXM", traffic=t)

    a, b = wear_of(write), wear_of(write + more)
    assert b.ssd_life_used > a.ssd_life_used and b.energy.parts_j["ssd"] > a.energy.parts_j["ssd"]
