"""Context parallelism (``--cp``): the sequence split over cp GPUs, attention as a ring exchanging K/V blocks.

Megatron-Core's context parallelism; Liu et al., "Ring Attention", 2023. Every figure here is computed
from labkit's own functions: the tests check how the parts combine, not typed-in step times.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from labkit.advisor import costing, search, steptime
from labkit.advisor.costing import Layout
from labkit.advisor.rules import layout_problem
from labkit.errors import LabkitError
from labkit.hardware import gpu, transfer_time
from labkit.predict import collectives as coll
from labkit.predict import compute
from labkit.shapes import model_shape

LLAMA = model_shape("llama2-7b")
H100 = gpu("H100-SXM")


def test_world_size_and_label_count_cp() -> None:
    lay = Layout(2, 8, 1, cp=4)
    assert lay.gpus == 2 * 8 * 1 * 4
    assert "cp4" in lay.label and "cp" not in Layout(2, 8, 1).label


@pytest.mark.parametrize("cp", [0, -1])
def test_cp_must_be_positive(cp: int) -> None:
    with pytest.raises(LabkitError, match="cp must be a positive integer"):
        Layout(1, 1, 1, cp=cp)


def test_cp_refuses_explicit_attention_with_the_reason() -> None:
    with pytest.raises(LabkitError, match="cp must be 1 with explicit attention: context parallelism runs attention"):
        Layout(1, 1, 1, attention="eager", cp=2)
    with pytest.raises(LabkitError, match="cp must be 1 with explicit attention"):
        compute.layer_times(LLAMA, 8192, 1, 1, H100, flash=False, cp=2)


def test_each_gpu_computes_one_cp_th_of_the_layer() -> None:
    """GEMMs and element-wise kernels on b s/cp rows; attention on s/cp queries against all s keys: 1/cp."""
    whole = compute.layer_times(LLAMA, 16384, 1, 1, H100, flash=True)
    half = compute.layer_times(LLAMA, 16384, 1, 1, H100, flash=True, cp=2)
    assert half.gemm == pytest.approx(whole.gemm / 2, rel=0.02)
    assert half.attention == pytest.approx(whole.attention / 2)
    assert half.elementwise == pytest.approx(whole.elementwise / 2)
    # not a shorter sequence: attention over (s/cp)^2 would be a quarter
    short = compute.layer_times(LLAMA, 8192, 1, 1, H100, flash=True)
    assert half.attention == pytest.approx(2 * short.attention)


def test_ring_exposes_only_what_exceeds_a_blocks_attention() -> None:
    """cp - 1 sends of K and V (2 b s/cp kv e / t bytes) forward, twice that backward, each hidden behind one block."""
    lay, s, e = Layout(1, 8, 1, cp=8), 8192, 2
    net = link_between_nodes()
    send = transfer_time(2 * e * s / 8 * LLAMA.kv_hidden / 8, net)
    att = compute.layer_times(LLAMA, s, 1, 8, H100, "bf16", True, True, cp=8).attention
    exposed = steptime.cp_seconds(LLAMA, s, lay, net, e, att)
    expected = LLAMA.layers * 7 * (max(0.0, send - att / 8) + max(0.0, 2 * send - 2 * att / 8))
    assert exposed == pytest.approx(expected)
    exposed_all = replace(steptime.DEFAULT, overlap_cp=False)
    assert steptime.cp_seconds(LLAMA, s, lay, net, e, att, exposed_all) == pytest.approx(LLAMA.layers * 7 * 3 * send)
    assert steptime.cp_seconds(LLAMA, s, Layout(1, 8, 1), net, e, att) == 0.0


def test_full_recompute_repeats_the_forward_ring() -> None:
    exposed_all = replace(steptime.DEFAULT, overlap_cp=False)
    net, args = link_between_nodes(), (LLAMA, 8192)
    plain = steptime.cp_seconds(*args, Layout(1, 8, 1, cp=4), net, 2, 0.0, exposed_all)
    again = steptime.cp_seconds(*args, Layout(1, 8, 1, cp=4, recompute="full"), net, 2, 0.0, exposed_all)
    assert again == pytest.approx(plain * 4 / 3)


def link_between_nodes():
    return costing.machine("H100-SXM", 64).cluster.inter_node


def test_gradients_reduce_over_dp_times_cp() -> None:
    mc = costing.machine("H100-SXM", 32)
    with_cp, without = Layout(2, 8, 1, cp=2), Layout(4, 8, 1)
    ln = costing.links(with_cp, mc)
    assert ln["dp"] == costing.links(without, mc)["dp"]
    a = steptime.dp_seconds(1e9, with_cp, 1, ln["dp"], 2, 2, 0.0)
    b = steptime.dp_seconds(1e9, without, 1, ln["dp"], 2, 2, 0.0)
    assert a == b and a[1] == pytest.approx(coll.all_reduce(2e9, 4, ln["dp"]))


def test_cp_ring_stays_on_nvlink_inside_a_node() -> None:
    mc = costing.machine("H100-SXM", 16)
    assert costing.links(Layout(2, 4, 1, cp=2), mc)["cp"] == mc.cluster.intra_node
    assert costing.links(Layout(1, 8, 1, cp=2), mc)["cp"] == mc.cluster.inter_node


def test_step_times_with_cp_divide_the_compute_and_price_the_ring() -> None:
    mc = costing.machine("H100-SXM", 16, framework="megatron-te")
    t1 = costing.step_times(LLAMA, 16384, 16, Layout(2, 8, 1, cp=1), costing.machine("H100-SXM", 16))
    t2 = costing.step_times(LLAMA, 16384, 16, Layout(1, 8, 1, cp=2), mc)
    # the same 16 sequences of 16,384 tokens on 16 GPUs: dp 2 runs 8 micro-batches of s, cp 2 runs 16 of s/2
    assert t2["compute"] == pytest.approx(t1["compute"], rel=0.05)
    assert "cp" in steptime.TIMES and t2["cp"] > 0.0 and t1["cp"] == 0.0  # the pair crosses nodes: tp 8 fills one


def test_seq_must_split_into_2_cp_chunks() -> None:
    mc = costing.machine("H100-SXM", 16)
    rule, why = layout_problem(LLAMA, Layout(1, 8, 1, cp=2), mc, seq=4098)
    assert rule == "cp-seq" and "2 x cp equal chunks" in why
    assert layout_problem(LLAMA, Layout(1, 8, 1, cp=2), mc, seq=4096) == ("", "")


def test_search_tries_cp_only_on_long_sequences() -> None:
    assert search.cp_degrees(16, 4096, {}) == (1,)
    assert search.cp_degrees(16, 32768, {}) == (1, 2, 4, 8)
    assert search.cp_degrees(16, 32768, {"attention": "explicit"}) == (1,)
    assert search.cp_degrees(16, 4096, {"cp": 2}) == (2,)
    long = search.advise(LLAMA, 64, "H100-SXM", 16, seq=32768)
    assert any(p.layout.cp > 1 for p in long.kept)
    short = search.advise(LLAMA, 64, "H100-SXM", 16, seq=4096)
    assert all(p.layout.cp == 1 for p in (*short.kept, *short.rejected))


def test_an_exact_cp_layout_is_priced_as_given() -> None:
    adv = search.advise(LLAMA, 64, "H100-SXM", 32, seq=32768, fixed={"dp": 2, "tp": 8, "pp": 1, "cp": 2})
    assert adv.exact is not None and adv.exact.layout.cp == 2 and adv.exact.layout.gpus == 32
    assert all(p.layout.cp == 2 for p in adv.kept)


def test_every_spelling_of_explicit_attention_keeps_the_search_at_cp_1_and_cp_0_is_refused() -> None:

    long = replace(model_shape("llama2-7b"), seq=8192)
    for spelling in ("explicit", "eager"):
        assert search.cp_degrees(8, 8192, {"attention": spelling}) == (1,)
        search.advise(long, 16, "H100", gpus=8, fixed={"attention": spelling, "dp": 2, "tp": 2, "pp": 1})
    assert search.cp_degrees(8, 8192, {"attention": "sdpa"}) == (1, 2, 4, 8)
    with pytest.raises(LabkitError, match=r"cp must be a positive integer \(got 0\)"):
        search.advise("llama2-7b", 16, "H100", gpus=8, fixed={"cp": 0})


def test_zero_shards_states_over_dp_times_cp_and_activations_split_by_cp() -> None:
    """Megatron-Core's distributed optimizer shards over the data-parallel-with-context group."""
    from labkit.advisor import footprint

    shape = model_shape("llama2-7b")
    one = footprint.memory(shape, 32768, Layout(dp=4, tp=2, pp=1, cp=1, zero_stage=1), 1)
    four = footprint.memory(shape, 32768, Layout(dp=1, tp=2, pp=1, cp=4, zero_stage=1), 1)
    assert four["optimizer"] == pytest.approx(one["optimizer"])  # both shard over 4 GPUs holding the same weights
    assert four["activations"] == pytest.approx(one["activations"] / 4)
