"""The analytic model: published figures reproduced, formulas exact, properties that must hold."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from labkit.errors import LabkitError
from labkit.predict.activation_terms import activation_terms
from labkit.predict.estimate import (
    PRECISIONS,
    TrainingSetup,
    activation_bytes_per_layer,
    estimate_memory,
    in_flight_microbatches,
    model_state_bytes,
    training_flops,
    zero_communication_elements,
)
from labkit.references import section, zero_examples
from labkit.shapes import ModelShape, model_names, model_shape

K = section("activations")


def as_printed(x: float, printed: float) -> float:
    """``x`` rounded to the decimals the paper printed (1.875 -> 1.9 beside a printed 1.9)."""
    decimals = len(repr(float(printed)).split(".")[1].rstrip("0"))
    return round(x, decimals)


@pytest.mark.parametrize("ex", zero_examples(), ids=lambda e: f"{e.params:.3g} params, dp {e.dp}")
def test_zero_example_as_printed(ex):
    zero = section("zero")
    assert zero["bytes_weights"] + zero["bytes_gradients"] + zero["k"] == 16
    assert ex.stage_gb[3] == 1.9  # ZeRO's Figure 1 prints 1.9 GB (the formula's 1.875, rounded)
    for stage, published in enumerate(ex.stage_gb):
        total = sum(model_state_bytes(int(ex.params), "bf16-mixed", stage, ex.dp).values())
        assert as_printed(total / 1e9, published) == pytest.approx(published), f"stage {stage}"


def test_zero_communication_volumes():
    comm = section("zero")["communication"]
    for stage, units in enumerate(comm["stage"]):
        assert zero_communication_elements(1000, stage) == units * 1000


SHAPES = [model_shape(n) for n in ("gpt2", "gpt3-175b", "gpt2-xl")] + [
    ModelShape("tiny", layers=2, hidden=64, heads=4, vocab=35, seq=64)
]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: s.name)
@pytest.mark.parametrize("s, b", [(2048, 1), (1024, 8), (64, 16)])
def test_korthikanti_per_layer_formulas_exactly(shape, s, b):
    """Table 2 of Korthikanti et al. 2022, with the coefficients read from references.toml."""
    h, a = shape.hidden, shape.heads
    sbh, core = s * b * h, K["as_over_h"] * a * s / h
    per_layer = activation_bytes_per_layer
    assert per_layer(shape, s, b) == pytest.approx(sbh * (K["sbh"] + core), rel=1e-12)
    assert per_layer(shape, s, b, recompute="selective") == pytest.approx(sbh * K["sbh"], rel=1e-12)
    assert per_layer(shape, s, b, recompute="full") == pytest.approx(K["full_recompute"] * sbh, rel=1e-12)
    for t in (d for d in (2, 4, 8) if a % d == 0):
        tp_only = sbh * (K["tp_replicated"] + K["tp_split"] / t + core / t)
        assert per_layer(shape, s, b, tp=t) == pytest.approx(tp_only, rel=1e-12)
        assert per_layer(shape, s, b, tp=t, sp=True) == pytest.approx(sbh * (K["sbh"] / t + core / t), rel=1e-12)
        selective_sp = per_layer(shape, s, b, tp=t, sp=True, recompute="selective")
        assert selective_sp == pytest.approx(sbh * K["sbh"] / t, rel=1e-12)


def test_terms_add_up_to_34_and_5():
    shape = model_shape("gpt3-175b")
    s, b = 2048, 2
    total = sum(t.bytes for t in activation_terms(shape, s, b))
    assert total == pytest.approx(s * b * shape.hidden * 34 + 5 * shape.heads * s * s * b, rel=1e-12)


def test_megatron_gpt3_activations_are_about_70_percent():
    ref = K["megatron_gpt3"]
    setup = TrainingSetup(model_shape(ref["model"]), micro_batch=ref["micro_batch"], seq=ref["seq"],
                          tp=ref["tp"], pp=ref["pp"], dp=ref["dp"], attention="explicit")  # Megatron-LM 2021
    assert ref["tp"] * ref["pp"] * ref["dp"] == ref["gpus"]
    assert 0.6 < estimate_memory(setup).activation_share < 0.8


@pytest.mark.parametrize("name", model_names())
def test_flops_equal_narayanan_for_gpt_shapes(name):
    shape = model_shape(name)
    if shape.gated or shape.kv_heads or shape.ffn:
        pytest.skip("the closed form assumes a 4h GeLU MLP and full multi-head attention")
    s, b, L, h, V = shape.seq, 4, shape.layers, shape.hidden, shape.vocab
    closed = 72 * b * s * L * h * h * (1 + s / (6 * h) + V / (12 * L * h))
    assert training_flops(shape, s, b) == pytest.approx(closed, rel=1e-12)
    assert training_flops(shape, s, b, "full") > training_flops(shape, s, b, "selective") > closed


# ---------------------------------------------------------------- properties (hypothesis)

dims = st.integers(1, 64)


@st.composite
def shapes(draw) -> ModelShape:
    heads = draw(st.sampled_from([1, 2, 4, 8]))
    return ModelShape("h", layers=draw(st.integers(1, 8)), hidden=heads * draw(st.integers(1, 32)) * 8,
                      heads=heads, vocab=draw(st.integers(2, 5000)), seq=draw(st.integers(1, 512)),
                      dropout=draw(st.booleans()))


@settings(max_examples=150, deadline=None)
@given(params=st.integers(1, 10**12), dp=st.integers(1, 4096), precision=st.sampled_from(list(PRECISIONS)))
def test_zero_stages_never_grow_and_stage3_divides_everything(params, dp, precision):
    totals = [sum(model_state_bytes(params, precision, z, dp).values()) for z in range(4)]
    assert all(a >= b for a, b in zip(totals, totals[1:], strict=False))
    assert totals[3] == pytest.approx(totals[0] / dp)
    p = PRECISIONS[precision]
    assert totals[0] == (p.weights + p.grads + p.optimizer) * params


@settings(max_examples=150, deadline=None)
@given(shape=shapes(), s=st.integers(1, 512), b=dims, e=st.sampled_from([2, 4]))
def test_activation_orderings(shape, s, b, e):
    f = activation_bytes_per_layer
    none, sel, full = (f(shape, s, b, e, recompute=r) for r in ("none", "selective", "full"))
    assert none >= sel >= full > 0
    assert f(shape, s + 1, b, e) > none and f(shape, s, b + 1, e) > none
    assert f(shape, s, b, e, attention="fused") <= none or s == 1
    for t in (d for d in (2, 4, 8) if shape.heads % d == 0):
        assert f(shape, s, b, e, tp=t, sp=True) <= f(shape, s, b, e, tp=t) < none
    if shape.dropout:
        assert sum(t.bytes for t in activation_terms(shape, s, b, e)) == pytest.approx(none)


@settings(max_examples=100, deadline=None)
@given(shape=shapes(), b=dims, zero=st.integers(0, 3), dp=st.integers(1, 64),
       cap=st.integers(1, 10**12))
def test_estimate_sums_its_parts_and_fits_means_headroom(shape, b, zero, dp, cap):
    est = estimate_memory(TrainingSetup(shape, micro_batch=b, zero_stage=zero, dp=dp), cap, "x")
    parts = est.per_device_bytes
    assert parts["total"] == pytest.approx(sum(v for k, v in parts.items() if k != "total"))
    assert est.fits == (est.headroom_bytes >= 0)
    judged = parts["total"] if zero else est.peak_bytes  # one GPU's step: the predicted whole-step peak
    assert (est.peak_bytes is None) == bool(zero)
    assert math.isclose(est.headroom_bytes, cap - judged, rel_tol=1e-9, abs_tol=1e-3)
    if not zero:
        assert est.peak_bytes > parts["total"] - parts["gradients"] and est.peak_phase in ("backward", "optimizer")


@settings(max_examples=100, deadline=None)
@given(p=st.integers(1, 64), m=st.integers(1, 256), v=st.integers(1, 8))
def test_1f1b_never_holds_more_than_gpipe(p, m, v):
    one = in_flight_microbatches(p, m, "1f1b")
    assert one <= in_flight_microbatches(p, m, "gpipe")
    assert one <= p
    assert in_flight_microbatches(p, m, "interleaved", v) == pytest.approx(
        one * (1 + (p - 1) / (p * v)) if p > 1 else 1.0)


def test_interleaved_factor_matches_the_simulated_schedule():
    """Peak chunks in flight at rank 0 of torch's interleaved order, over v chunks: p * (1 + (p-1)/(p*v))."""
    from labkit.sim import peak_in_flight, schedule

    for p, v in ((2, 2), (4, 2), (4, 3)):
        m = 2 * p
        peak_chunks = peak_in_flight(schedule("interleaved", p, m, v)[0])
        assert peak_chunks / v == pytest.approx(in_flight_microbatches(p, m, "interleaved", v))


# ---------------------------------------------------------------- bad input

GPT2 = model_shape("gpt2")


@pytest.mark.parametrize("make, field", [
    (lambda: ModelShape("x", layers=0, hidden=64, heads=4, vocab=10, seq=8), "layers"),
    (lambda: ModelShape("x", layers=2, hidden=-64, heads=4, vocab=10, seq=8), "hidden"),
    (lambda: ModelShape("x", layers=2, hidden=64, heads=5, vocab=10, seq=8), "heads must divide hidden"),
    (lambda: TrainingSetup(GPT2, tp=5), "tp must divide heads"),
    (lambda: TrainingSetup(GPT2, zero_stage=4), "zero_stage must be one of 0, 1, 2, 3"),
    (lambda: TrainingSetup(GPT2, micro_batch=0), "micro_batch"),
    (lambda: TrainingSetup(GPT2, recompute="some"), "recompute must be one of none, selective, full, op"),
    (lambda: TrainingSetup(GPT2, precision="fp8"), "precision must be one of"),
    (lambda: TrainingSetup(GPT2, sp=True), "sp"),
    (lambda: model_shape("gpt5"), "model must be one of"),
    (lambda: model_state_bytes(-1), "params"),
])  # fmt: skip
def test_bad_input_names_the_field(make, field):
    with pytest.raises(LabkitError, match=field) as err:
        make()
    assert "\n" not in str(err.value)
