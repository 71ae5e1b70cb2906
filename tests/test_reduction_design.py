"""Scale and design of notebook 05: recompute x precision x optimizer-state bits on a real GPU, and its panel."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from labkit import hardware
from labkit.errors import LabkitError
from labkit.predict.estimate import (
    PRECISIONS,
    RECOMPUTE,
    TrainingSetup,
    activation_bytes_per_layer,
    estimate_memory,
    training_flops,
)
from labkit.reduction import design
from labkit.reduction.panel import ReductionPanel
from labkit.shapes import ModelShape, model_shape


@st.composite
def shapes(draw) -> ModelShape:
    heads = draw(st.sampled_from([1, 2, 4, 8]))
    return ModelShape("h", layers=draw(st.integers(1, 64)), hidden=heads * draw(st.integers(1, 32)) * 8,
                      heads=heads, vocab=draw(st.integers(2, 5000)), seq=draw(st.integers(1, 512)),
                      ffn=draw(st.sampled_from([0, 8, 200])), gated=draw(st.booleans()),
                      dropout=draw(st.booleans()))


precisions = st.sampled_from(design.PRECISION_NAMES)
batches = st.integers(1, 8)
GPU = hardware.gpu("A100-80GB")


# ---------------------------------------------------------------- the formulas, by hand


def test_blockwise_states_are_one_byte_plus_a_scale_per_block():
    assert design.blockwise_state_bytes(2048) == 2 * (2048 + 4)
    assert design.blockwise_state_bytes(2049) == 2 * (2049 + 8)
    assert design.blockwise_state_bytes(10, states=1, block=4) == 10 + 3 * 4
    psi = 7_000_000_000
    assert design.optimizer_state_bytes(psi, "fp32", 32) == 8 * psi
    assert design.optimizer_state_bytes(psi, "bf16-mixed", 8) == pytest.approx((4 + 2 + 8 / 2048) * psi, rel=1e-9)
    assert design.optimizer_state_bytes(psi, "fp32", 8) / psi == pytest.approx(2.0039, abs=1e-4)


def test_sqrt_segments_follow_checkpoint_sequential():
    assert [design.sqrt_segment(n) for n in (1, 2, 4, 32, 48, 96)] == [1, 1, 2, 5, 6, 9]
    shape = model_shape("gpt2-xl")  # 48 layers: 8 segments of 6, the last one not checkpointed
    s, b = 1024, 1
    layer = activation_bytes_per_layer(shape, s, b, recompute="none")
    kept = activation_bytes_per_layer(shape, s, b, recompute="full")
    assert design.segmented_activation_bytes(shape, s, b) == 7 * kept + 6 * layer
    assert design.segmented_activation_bytes(shape, s, b, segment=48) == 48 * layer
    # 9 segments of 5, then 3: re-running a segment of 5 beside 8 other inputs is the peak
    assert design.segmented_activation_bytes(shape, s, b, segment=5) == 8 * kept + 5 * layer
    per_layer_fwd = (training_flops(shape, s, b, "full") - training_flops(shape, s, b)) / 48
    assert design.extra_compute(shape, s, b, "sqrt") == pytest.approx(42 * per_layer_fwd / training_flops(shape, s, b))


def test_selective_extra_compute_reproduces_korthikanti_from_shapes():
    gpt3 = model_shape("gpt3-175b")
    # 2.7% quoted for GPT-3 175B is the attention core's share of the step (forward and backward) ...
    assert round(100 * design.attention_core_share(gpt3, 2048, 1), 1) == 2.7
    # ... and re-doing only its forward, all selective recompute repeats, is a third of that
    assert design.extra_compute(gpt3, 2048, 1, "selective") == pytest.approx(design.attention_core_share(
        gpt3, 2048, 1) / 3)
    assert design.extra_compute(gpt3, 2048, 1, "full") == pytest.approx(1 / 3, abs=0.005)  # 4x forward, not 3x


def test_agrees_with_estimate_exactly_where_settings_overlap():
    for name, seq in (("llama2-7b", 4096), ("gpt2-xl", 1024), ("gpt3-175b", 2048)):
        for recompute in [r for r in RECOMPUTE if r in design.RECOMPUTE_MODES]:
            for precision in PRECISIONS:
                d = design.evaluate(name, "H200", 2, seq, recompute, precision, 32)
                setup = TrainingSetup(model_shape(name), 2, seq, precision, recompute, attention="explicit")
                est = estimate_memory(setup, d.capacity_bytes)
                parts = est.per_device_bytes
                assert d.by_category == {k: parts[k] for k in design.CATEGORIES}
                assert d.total_bytes == parts["total"] and d.fits == est.fits


def test_llama_on_h200_needs_one_change_and_the_helper_names_it():
    none = design.evaluate("llama2-7b", "H200", 1, 4096)
    assert not none.fits and "needs 162.9 GB, the H200 holds 150.8 GB = 140.4 GiB, sold as 141 GB" in none.reason
    assert "model states take 107.8 GB, activations 55.1 GB" in none.reason
    best = design.cheapest_fit("llama2-7b", "H200", 1, 4096)
    assert best.fits and best.extra_compute == 0 and (best.recompute, best.optimizer_bits) == ("none", 8)
    fitting = [d for d in design.grid("llama2-7b", "H200", 1, 4096) if d.fits]
    assert min((d.extra_compute, d.total_bytes) for d in fitting) == (best.extra_compute, best.total_bytes)
    small = design.cheapest_fit("gpt2-xl", "RTX-4090", 1, 1024)  # 24.8 GB in a 24 GiB (25.8 GB) card
    assert (small.recompute, small.optimizer_bits) == ("none", 8)


def test_states_that_cannot_fit_say_so_and_nothing_fits():
    d = design.evaluate("gpt3-175b", "H200", 1, 2048, "full", "bf16-mixed", 8)
    assert not d.fits and "model states alone take" in d.reason and "no recompute mode can fit" in d.reason
    assert design.cheapest_fit("gpt3-175b", "H200", 1, 2048) is None
    assert design.evaluate("gpt2", "H200").reason == ""


@pytest.mark.parametrize("kwargs, message", [
    ({"recompute": "half"}, "recompute must be one of none, selective, sqrt, full (got 'half')"),
    ({"precision": "bf16-pure"}, "precision must be one of fp32, bf16-mixed, fp16-mixed (got 'bf16-pure')"),
    ({"optimizer_bits": 4}, "optimizer_bits must be one of 32, 8 (got 4)"),
    ({"micro_batch": 0}, "micro_batch must be a positive integer (got 0)"),
    ({"seq": -1}, "seq must be a positive integer or 0"),
    ({"model": "gpt5"}, "model must be one of"),
    ({"gpu": "A200"}, "gpu must be one of"),
])  # fmt: skip
def test_bad_input_names_the_field_and_the_allowed_values(kwargs, message):
    args = {"model": "gpt2", "gpu": "H200"} | kwargs
    with pytest.raises(LabkitError, match=message.replace("(", r"\(").replace(")", r"\)")):
        design.evaluate(**args)
    with pytest.raises(LabkitError, match="segment must be between 1 and layers=12"):
        design.segmented_activation_bytes(model_shape("gpt2"), 1024, 1, segment=13)


# ---------------------------------------------------------------- properties (hypothesis)


@settings(max_examples=80, deadline=None)
@given(shape=shapes(), b=batches, precision=precisions, bits=st.sampled_from(design.OPTIMIZER_BITS))
def test_recompute_never_grows_memory_and_costs_more_the_more_it_saves(shape, b, precision, bits):
    d = {r: design.evaluate(shape, GPU, b, 0, r, precision, bits) for r in design.RECOMPUTE_MODES}
    act = {r: x.activations_bytes for r, x in d.items()}
    assert act["none"] >= act["selective"] >= act["full"] > 0
    assert act["none"] >= act["sqrt"] > 0  # sqrt against selective or full depends on the shape
    extra = {r: x.extra_compute for r, x in d.items()}
    assert extra["none"] == 0 < extra["selective"] < extra["full"]
    assert extra["sqrt"] < extra["full"] and (extra["sqrt"] > 0) == (shape.layers > 1)
    if shape.layers == 1:
        assert act["sqrt"] == act["none"]
    assert len({(x.parameters_bytes, x.gradients_bytes, x.optimizer_bytes) for x in d.values()}) == 1


@settings(max_examples=80, deadline=None)
@given(shape=shapes(), b=batches, precision=precisions, recompute=st.sampled_from(design.RECOMPUTE_MODES))
def test_8bit_states_never_exceed_32bit_and_change_nothing_else(shape, b, precision, recompute):
    full, small = (design.evaluate(shape, GPU, b, 0, recompute, precision, bits) for bits in (32, 8))
    assert small.optimizer_bytes < full.optimizer_bytes
    assert full.optimizer_bytes - small.optimizer_bytes == pytest.approx(6 * shape.params - 8 * math.ceil(
        shape.params / 2048))
    assert (small.parameters_bytes, small.gradients_bytes, small.activations_bytes) == (
        full.parameters_bytes, full.gradients_bytes, full.activations_bytes)
    assert small.extra_compute == full.extra_compute and small.fits >= full.fits


@settings(max_examples=60, deadline=None)
@given(shape=shapes(), b=batches, segment=st.integers(1, 64))
def test_any_segment_holds_one_segment_and_never_more_than_no_recompute(shape, b, segment):
    segment, f = min(segment, shape.layers), activation_bytes_per_layer
    seg = design.segmented_activation_bytes(shape, shape.seq, b, segment=segment)
    layer, kept = f(shape, shape.seq, b), f(shape, shape.seq, b, recompute="full")
    assert seg >= segment * layer and seg >= (math.ceil(shape.layers / segment) - 1) * kept
    assert seg <= shape.layers * layer
    assert 0 <= design.extra_compute(shape, shape.seq, b, "sqrt", segment) < design.extra_compute(
        shape, shape.seq, b, "full")


# ---------------------------------------------------------------- the panel, without a browser


def test_panel_builds_and_redraws_on_change():
    panel = ReductionPanel()  # gpt2-xl on an RTX-4090, no recompute, bf16 mixed, 32-bit states
    assert panel.design is not None and not panel.design.fits and len(panel.figures) == 1
    assert "does not fit" in panel.message.value and "cheapest" not in panel.message.value  # the task's answer
    assert panel.best is not None and panel.best.label.startswith("recompute none")  # kept for the check only
    ax = panel.figures[0].axes[0]
    assert [t.get_text().split("\n")[0] for t in ax.get_xticklabels()] == ["> none", "selective", "sqrt", "full"]
    first = panel.figures[0]
    panel.optimizer_bits.value = 8
    panel.recompute.value = "selective"
    assert panel.design.fits and "fits on the RTX-4090" in panel.message.value
    assert "recompute adds 3.1% compute" in panel.message.value and panel.figures[0] is not first
    panel.model.value = "gpt3-175b"
    assert "no combination" in panel.message.value and "model states alone" in panel.message.value


@pytest.mark.parametrize("control, value, message", [
    ("micro_batch", 0, "micro_batch must be a positive integer"),
    ("seq", -4, "seq must be a positive integer or 0"),
])  # fmt: skip
def test_panel_shows_bad_input_as_a_message(control, value, message):
    panel = ReductionPanel()
    getattr(panel, control).value = value
    assert panel.design is None and not panel.figures
    assert "bad input" in panel.message.value and message in panel.message.value
    getattr(panel, control).value = 1024 if control == "seq" else 1
    assert panel.design is not None and panel.figures


def test_panel_rejects_unknown_choices_clearly():
    with pytest.raises(LabkitError, match="recompute must be one of none, selective, sqrt, full"):
        ReductionPanel(recompute="some")
    with pytest.raises(LabkitError, match="optimizer_bits must be one of 32, 8"):
        ReductionPanel(optimizer_bits=16)
