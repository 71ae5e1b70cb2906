"""Selective recompute's two FLOP counts agree with the measurement, Korthikanti's GPT-3 headline, segment length."""

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from labkit.predict.estimate import training_flops
from labkit.reduction import exercises  # noqa: F401  (registers the 05.* exercises)
from labkit.reduction.design import evaluate, sqrt_segment
from labkit.reduction.recompute import compare_plans
from labkit.reduction.tradeoffs import (
    attention_ratio,
    best_segment_estimate,
    measured_tradeoff,
    segment_sweep,
    segment_text,
    selective_extra_flops,
    selective_text,
    selective_tradeoff,
)
from labkit.rig.model import GPTConfig
from labkit.rig.train import TrainConfig
from labkit.shapes import ModelShape, model_shape
from labkit.teach import checks

CFG = GPTConfig(vocab_size=35, seq_len=16, n_layer=4, n_head=2, d_model=32, dropout=0.1)
TRAIN = TrainConfig(model=CFG, batch_size=2, threads=1)


@pytest.fixture(scope="module")
def plans():
    return {r.mode: r for r in compare_plans(TRAIN, ["none", "selective"])}


def test_torch_repeats_half_of_korthikanti_count_measured(plans) -> None:
    shape = ModelShape.from_config(CFG)
    none, sel = plans["none"], plans["selective"]
    assert none.flops == training_flops(shape, 16, 2)
    assert sel.extra_flops == selective_extra_flops(shape, 16, 2, early_stop=True)
    assert selective_extra_flops(shape, 16, 2) == 2 * sel.extra_flops == 4 * 2 * 16**2 * 32 * 4
    row = measured_tradeoff("tiny", shape, 16, 2, none.per_layer[0], sel.per_layer[0], none.flops, sel.extra_flops)
    assert row.extra_core_forward == pytest.approx(2 * row.extra_early_stop)
    assert 0.10 < row.saved < 0.13  # 5as/h = 5 beside 34: little to save at s = 16
    assert "tiny" in selective_text([(row, shape)])


def test_gpt3_headline_is_korthikanti_s() -> None:
    gpt3 = model_shape("gpt3-175b")
    r = selective_tradeoff(gpt3, 2048)
    assert r.none_bytes == 2_868_903_936 and r.selective_bytes == 855_638_016
    assert round(100 * r.saved) == 70  # the paper: about 70% less activation memory
    assert round(100 * r.core_share, 1) == 2.7  # the paper's 2.7% is the core's forward + backward share
    assert r.extra_core_forward == pytest.approx(r.core_share / 3)
    assert r.extra_early_stop == pytest.approx(r.core_share / 6)
    assert attention_ratio(gpt3, 2048) == 80


def test_exercise_expects_the_measured_count() -> None:
    gpt3 = model_shape("gpt3-175b")
    early = 100 * selective_extra_flops(gpt3, 2048, 1, early_stop=True) / training_flops(gpt3, 2048, 1)
    assert round(early, 2) == 0.45
    assert checks.EXERCISES["05.selective_percent"].answer() == pytest.approx(early)
    assert checks.check("05.selective_percent", round(early, 2))
    wrong = checks.check("05.selective_percent", round(2 * early, 2))  # the core's whole forward
    assert not wrong and "Korthikanti" in wrong.diagnosis


@settings(max_examples=40, deadline=None)
@given(heads=st.integers(1, 64), seq=st.integers(1, 8192), per_head=st.integers(1, 256))
def test_saved_share_is_the_attention_term(heads: int, seq: int, per_head: int) -> None:
    shape = ModelShape(name="x", layers=2, hidden=heads * per_head, heads=heads, vocab=100, seq=seq)
    r = selective_tradeoff(shape, seq)
    x = attention_ratio(shape, seq)
    assert r.saved == pytest.approx(x / (34 + x))


def test_per_layer_full_recompute_beats_sqrt_on_gpt2_xl() -> None:
    xl = model_shape("gpt2-xl")
    rows = segment_sweep(xl, 1024)
    best = min(rows, key=lambda r: r.peak_bytes)
    assert best.segment == 1 and best_segment_estimate(xl, 1024) < 1.5
    chen = next(r for r in rows if r.segment == sqrt_segment(48))
    assert chen.peak_bytes > 3 * best.peak_bytes
    assert "Chen's sqrt(L)" in segment_text(rows, xl)
    full, sqrt = evaluate("gpt2-xl", "RTX-4090", 1, 1024, "full"), evaluate("gpt2-xl", "RTX-4090", 1, 1024, "sqrt")
    assert full.total_bytes < sqrt.total_bytes


@settings(max_examples=30, deadline=None)
@given(layers=st.integers(4, 96), per_head=st.integers(16, 128), heads=st.integers(1, 32), seq=st.integers(16, 4096))
def test_the_estimate_finds_the_sweep_minimum(layers: int, per_head: int, heads: int, seq: int) -> None:
    shape = ModelShape(name="x", layers=layers, hidden=heads * per_head, heads=heads, vocab=100, seq=seq)
    rows = segment_sweep(shape, seq, segments=tuple(range(1, layers + 1)))
    best = min(rows, key=lambda r: (r.peak_bytes, r.segment)).segment
    k = best_segment_estimate(shape, seq)
    assert best <= max(2, math.ceil(2 * k))  # a transformer's input is small: short segments win
