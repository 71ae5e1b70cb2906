"""The shared in-step moments (``labkit.predict.peak_moments``): their arithmetic, read off the modules' ops.

The whole-step figures they feed are judged against fake-tensor steps in ``tests/test_fake_property.py``;
here each moment's terms are checked on their own. Pure arithmetic: well under a second.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from labkit.predict.peak_moments import (
    embeddings_held,
    mlp_backward_transients,
    mlp_forward_transients,
    recompute_forward_transients,
    rmsnorm_backward_transients,
    rmsnorm_forward_transients,
)
from labkit.predict.step_peak import mlp_backward_transients as from_step_peak
from labkit.shapes.hf_models import small_spec

dims = st.tuples(st.integers(1, 4), st.sampled_from([16, 32, 64]), st.sampled_from([2, 4]))


@given(dims)
def test_gpt2_keeps_its_position_embedding_llama_does_not(d):
    b, s, e = d
    gpt2, llama = small_spec("gpt2").shape, small_spec("llama").shape
    assert embeddings_held(gpt2, b, s, e) == e * (b * s + s) * gpt2.hidden
    assert embeddings_held(llama, b, s, e) == e * b * s * llama.hidden


@given(dims, st.sampled_from(["gpt2", "llama"]))
def test_a_down_adapter_saves_the_product_and_adds_its_branch(d, family):
    b, s, e = d
    shape = small_spec(family).shape
    bsh, bsf = e * b * s * shape.hidden, e * b * s * shape.ffn_size
    plain = mlp_forward_transients(shape, b, s, e).bytes
    down = mlp_forward_transients(shape, b, s, e, ("down",)).bytes
    assert down - plain == 2 * bsh - bsf  # base, lora_B and their sum; the product is the adapter's saved input
    up = mlp_forward_transients(shape, b, s, e, ("up",)).bytes
    assert plain - up == bsh  # the second norm's output is the up adapter's saved input


@given(dims)
def test_a_one_layer_gpt2_holds_its_layer_input(d):
    b, s, e = d
    shape = small_spec("gpt2", layers=1).shape
    held = mlp_forward_transients(shape, b, s, e, first_input_held=True).bytes
    assert held - mlp_forward_transients(shape, b, s, e).bytes == e * b * s * shape.hidden


@given(dims, st.sampled_from(["gpt2", "llama"]))
def test_recompute_holds_a_layer_working_set(d, family):
    b, s, e = d
    shape = small_spec(family).shape
    got = recompute_forward_transients(shape, b, s, e).bytes
    bsf = e * b * s * shape.ffn_size
    assert got >= (4 if family == "gpt2" else 3) * bsf  # gelu_new's chain; silu(gate), up, their product


@given(st.integers(1, 10**6), st.integers(1, 10**4))
def test_rmsnorm_cast_is_a_no_op_in_fp32(bsh, bs):
    assert rmsnorm_forward_transients(bsh, bs, 2).bytes == rmsnorm_forward_transients(bsh, bs, 4).bytes
    assert rmsnorm_backward_transients(bsh, 2).bytes == rmsnorm_backward_transients(bsh, 4, frozen_head=True).bytes
    assert rmsnorm_backward_transients(bsh, 4).bytes == 12 * bsh


def test_step_peak_and_finetune_peak_share_one_definition():
    assert from_step_peak is mlp_backward_transients
    assert mlp_backward_transients(8.0, 3.0).bytes == 3.0 + 3 * 8.0
