"""HBM bytes of the matrix multiplies (measured beside the formula), holding costs, Llama 2 beside labkit."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from labkit.economics import capital, grid, holding, published, run, strategies
from labkit.economics.measured import measure_gemm_bytes
from labkit.economics.traffic import gemm_traffic, layer_gemms
from labkit.errors import LabkitError
from labkit.predict.estimate import forward_flops
from labkit.rig.model import GPTConfig
from labkit.shapes import model_names, model_shape


def test_measured_matmul_bytes_equal_the_formula():
    cfg = GPTConfig(vocab_size=35, n_layer=2, d_model=64, n_head=4, seq_len=64)
    m = measure_gemm_bytes(cfg, batch_size=2)
    t = gemm_traffic(model_shape("tiny-gpt"), 64, 2, elem_bytes=4, recompute=False)
    assert m.calls == 3 * sum(g.count for g in layer_gemms(model_shape("tiny-gpt"), 64, 2))  # fwd, dX, dW
    assert m.nbytes == t.weight_bytes + t.activation_bytes


@pytest.mark.parametrize("name", model_names())
def test_gemm_shapes_give_forward_flops(name):
    s = model_shape(name)
    attention = s.layers * 4 * s.seq * s.seq * s.hidden
    assert sum(g.flops for g in layer_gemms(s, s.seq, 1)) + attention == forward_flops(s, s.seq, 1)


def test_recompute_adds_one_pass_and_weights_are_about_8_bytes_per_parameter():
    s = model_shape("llama2-7b")
    full, none = gemm_traffic(s, s.seq), gemm_traffic(s, s.seq, recompute=False)
    assert full.weight_bytes / none.weight_bytes == pytest.approx(4 / 3)
    assert 7.5 < full.weight_bytes / s.params <= 8.0  # 3 reads + 1 write of the matrices (not the embedding)


def test_hbm_energy_is_a_small_but_real_share_of_the_run():
    r = run.cost_run("hbm", "llama2-7b", 20e9, "H100-SXM")
    share = r.energy.parts_j["hbm"] / r.energy.total_j
    assert 0.005 < share < 0.05
    p = r.plan
    assert p.hbm_bytes == pytest.approx(p.gemm_bytes + p.activation_bytes_per_step + 28 * p.params)
    assert p.compute_s >= p.hbm_bytes / (p.gpus * 3.35e12)  # never faster than HBM streams the bytes


@settings(max_examples=20, deadline=None)
@given(mb=st.integers(1, 8))
def test_bigger_micro_batches_reread_weights_less(mb):
    s = model_shape("gpt2")
    one, more = gemm_traffic(s, s.seq, 1), gemm_traffic(s, s.seq, mb)
    assert more.weight_bytes == one.weight_bytes
    assert more.activation_bytes == pytest.approx(mb * one.activation_bytes)


def test_holding_costs_by_hand():
    year = capital.YEAR_S
    h = holding.hold(1e12, "ssd", year, lifetime_years=4)
    assert h.usd == pytest.approx(1000 * capital.usd_per_gb("ssd") / 4)
    assert h.kg_co2e == pytest.approx(1000 * 0.16 / 4)  # Tannu & Nair: 0.16 kg CO2e per GB
    assert holding.hold(1e12, "dram", year).kg_co2e is None  # no published figure in the data: unknown
    rows = holding.hold_all(1e12, year)
    assert [r.tier for r in rows] == list(capital.TIERS)
    assert rows[0].usd > rows[1].usd > rows[2].usd > rows[3].usd
    with pytest.raises(LabkitError, match="tier must be one of hbm, dram, ssd, hdd"):
        holding.hold(1.0, "tape", 1.0)
    with pytest.raises(LabkitError, match="embodied tier must be one of ssd, hdd"):
        grid.embodied_kg_per_gb("dram")


def test_ssd_embodied_share_follows_time_or_wear():
    r = run.cost_run("ssd-offload", "llama2-7b", 20e9, "H100-SXM")
    made = r.wear.drives * 3840 * 0.16
    years = r.time_s / (5 * capital.YEAR_S)
    assert r.ssd_embodied_kg == pytest.approx(made * max(years, r.ssd_life_used))
    assert run.cost_run("hbm", "llama2-7b", 20e9, "H100-SXM").ssd_embodied_kg == 0.0


def test_llama2_beside_labkit_splits_into_three_factors():
    runs = {p.name: p for p in published.load_runs()}
    assert runs["llama2-7b"].gpu_hours == 184320 and runs["llama2-70b"].t_co2 == 291.42
    for p in runs.values():  # Meta's tonnes are GPU-hours x power x one factor
        assert p.implied_g_co2_per_kwh == pytest.approx(423.5, abs=0.2)
    for b in published.beside():
        assert math.prod(b.factors.values()) == pytest.approx(b.t_co2 / b.paper.t_co2)
        assert 0.35 < b.paper.implied_mfu() < 0.5
        assert b.factors["GPU-hours"] == pytest.approx(b.paper.implied_mfu() / strategies.MFU, rel=0.02)
        hours, tonnes = b.records  # the paper's figure is the measured one, labkit's the predicted
        assert (hours.measured, hours.predicted, tonnes.measured) == (b.paper.gpu_hours, b.gpu_hours, b.paper.t_co2)
        assert tonnes.ratio == pytest.approx(1 / math.prod(b.factors.values()))
    assert {b.paper.name for b in published.beside()} == {"llama2-7b", "llama2-13b", "llama2-70b"}


def test_bad_published_file_names_the_field(tmp_path):
    path = tmp_path / "runs.toml"
    path.write_text('[[run]]\nname = "x"\nmodel = ""\ngpu = "A100-80GB"\ntokens = 1e12\ngpu_hours = -1\n'
                    'power_w = 400\nt_co2 = 1\nsource = "s"\n')
    with pytest.raises(LabkitError, match="run 'x': gpu_hours must be a positive number"):
        published.load_runs(str(path))
