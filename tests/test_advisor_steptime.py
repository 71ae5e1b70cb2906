"""The step-time model's parts and the machine it runs on: properties that hold for any shape and layout."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from labkit.advisor import costing, search
from labkit.advisor.costing import Layout
from labkit.errors import LabkitError
from labkit.hardware import gpu, link
from labkit.predict import collectives as coll
from labkit.predict import compute
from labkit.shapes import ModelShape, model_shape

SHAPES = st.builds(lambda layers, heads, d, seq: ModelShape("h", layers, heads * d, heads, 32000, seq),
                   st.sampled_from([4, 8, 24]), st.sampled_from([8, 16, 32]), st.sampled_from([64, 128]),
                   st.sampled_from([256, 1024, 2048]))


@settings(max_examples=30, deadline=None)
@given(SHAPES, st.sampled_from([1, 2, 4, 8]), st.sampled_from(["A100-80GB", "H100-SXM", "RTX-4090"]))
def test_kernel_time_is_at_least_the_roofline_and_shrinks_with_tp(shape, tp, name):
    dev = gpu(name)
    lt = compute.layer_times(shape, shape.seq, 1, tp, dev)
    h, s = shape.hidden, shape.seq
    gemm_flops = 2 * s * (3 * h * h + h * h + 2 * h * shape.ffn_size) / tp
    assert lt.gemm >= gemm_flops / dev.peak_flops["bf16"] - 1e-12  # never faster than peak
    assert lt.forward > 0 and lt.backward > lt.forward
    if tp > 1:
        assert compute.layer_times(shape, s, 1, 1, dev).gemm > lt.gemm  # each rank multiplies 1/t of the weights


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 10**10), st.integers(2, 1024))
def test_collectives(nbytes, n):
    nv = link("nvlink3")
    ar = coll.all_reduce(nbytes, n, nv)
    assert ar == pytest.approx(coll.all_gather(nbytes, n, nv) + coll.reduce_scatter(nbytes, n, nv))
    assert ar >= 2 * (n - 1) / n * nbytes / nv.bandwidth  # never faster than the wire
    assert coll.all_reduce(nbytes, 1, nv) == 0.0


@settings(max_examples=20, deadline=None)
@given(st.sampled_from([2, 4, 8]), st.sampled_from([8, 16, 32]))
def test_interleaving_shrinks_the_bubble_by_v(pp, m):
    shape, mc = model_shape("gpt2-medium"), costing.machine("A100-80GB", 8 * pp)
    base = costing.step_times(shape, 1024, 8 * m, Layout(8, 1, pp), mc)
    for v in (2, 3):
        if (shape.layers // pp) % v:
            continue
        inter = costing.step_times(shape, 1024, 8 * m, Layout(8, 1, pp, schedule="interleaved", chunks=v), mc)
        assert inter["compute"] == pytest.approx(base["compute"])
        per_mb = lambda t: (t["compute"] + t["tp"] + t["pp"]) / m  # noqa: E731
        assert inter["bubble"] == pytest.approx((pp - 1) / v * per_mb(inter))


def test_times_sum_to_the_step_and_recompute_costs_a_forward():
    shape, mc = model_shape("gpt3-175b"), costing.machine("A100-80GB", 1024)
    none = costing.step_times(shape, 2048, 1536, Layout(8, 8, 16), mc)
    full = costing.step_times(shape, 2048, 1536, Layout(8, 8, 16, recompute="full"), mc)
    sel = costing.step_times(shape, 2048, 1536, Layout(8, 8, 16, recompute="selective"), mc)
    assert none["compute"] < sel["compute"] < full["compute"] < 1.4 * none["compute"]  # about 4/3
    assert full["tp"] == pytest.approx(1.5 * none["tp"])  # the recomputed forward repeats its two all-reduces


def test_hosts_bound_the_machine():
    ws = costing.machine("RTX-4090", 1)
    assert ws.host.name == "workstation-rtx4090" and ws.dram_bytes == 128e9 and ws.nvme_bytes == 2000e9
    with pytest.raises(LabkitError, match="gpus must be at most 1 on host workstation-rtx4090: it has no network"):
        costing.machine("RTX-4090", 2)
    with pytest.raises(LabkitError, match="host must be one built with H100-SXM"):
        costing.machine("H100-SXM", 8, host="dgx-a100-host")
    with pytest.raises(LabkitError, match=r"headroom must be a fraction in \[0, 1\)"):
        costing.machine("A100-80GB", 8, headroom=1.2)
    dgx2 = costing.machine("V100-32GB", 16)
    assert dgx2.cluster.gpus_per_node == 16 and dgx2.host.nvlink_domain_gpus == 16
    a100 = costing.machine("A100-80GB", 8, headroom=0.2)
    assert a100.usable_bytes == pytest.approx(0.8 * a100.cluster.device.usable_memory_bytes)
    assert a100.cluster.device.usable_memory_bytes < 80 * 2**30  # what torch can allocate, not nvidia-smi's figure


def test_offload_is_judged_against_the_hosts_drives_and_dram():
    shape, big = model_shape("llama2-70b"), model_shape("gpt3-175b")
    ws = costing.machine("RTX-4090", 1)
    fits = search.evaluate(shape, 4096, 8, Layout(1, 1, 1, 1, 3, "full", "nvme"), ws)
    assert fits.feasible and fits.memory["nvme"] == pytest.approx(20 * shape.params)  # 1.4 TB on the 2 TB drive
    plan = search.evaluate(big, 2048, 8, Layout(1, 1, 1, 1, 3, "full", "nvme"), ws)
    assert plan.rule == "nvme" and "workstation-rtx4090 has 2,000 (1 x 2 TB drive)" in plan.reason
    dram = search.evaluate(shape, 4096, 8, Layout(1, 1, 1, 1, 2, "full", "dram"), ws)
    assert "of host DRAM per host, workstation-rtx4090 has 128" in dram.reason


def test_zero3_with_the_optimizer_on_the_cpu_is_offered():
    shape, mc = model_shape("llama2-70b"), costing.machine("A100-80GB", 8)
    plan = search.evaluate(shape, 4096, 64, Layout(8, 1, 1, 1, 3, "full", "dram"), mc)
    assert plan.feasible and plan.memory["dram"] == pytest.approx(14 * shape.params / 8)
    assert plan.memory["parameters"] == pytest.approx(2 * shape.params / 8)  # ZeRO-3 shards the 16-bit weights


def test_fixed_fields_are_kept_and_misses_close_the_gap():
    a = search.advise("gpt3-175b", 1536, "A100-80GB", 1024, seq=2048, fixed={"tp": 8, "recompute": "full"})
    assert a.kept and all(p.layout.tp == 8 and p.layout.recompute == "full" for p in a.kept) and a.exact is None
    b = search.advise("gpt3-175b", 8, "RTX-4090", 1, "fit")
    assert not b.kept and b.gaps and all("short by" in g for _, g in b.gaps)
    with pytest.raises(LabkitError, match="fixed must name layout fields"):
        search.advise("gpt2", 8, fixed={"colour": "blue"})
