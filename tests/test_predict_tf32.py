"""fp32 GEMMs are priced at the TF32 peak where the GPU has TF32 tensor cores, else at the fp32 peak (issue 21).

PyTorch runs fp32 matrix multiplies on TF32 tensor cores when ``torch.backends.cuda.matmul.allow_tf32`` is
set (Lightning and most training scripts set it); the catalogue records the dense TF32 peaks of the A100,
H100 and H200 datasheets. The element-wise kernels stay fp32 (4 bytes) either way.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from labkit.advisor import costing
from labkit.advisor.costing import Layout
from labkit.hardware import gpu
from labkit.predict import compute
from labkit.shapes import model_shape

FP32 = Layout(1, 1, 1, precision="fp32")
LLAMA = model_shape("llama2-7b")


@pytest.mark.parametrize("name", ["A100-40GB", "A100-80GB", "H100-SXM", "H200"])
def test_fp32_gemms_run_at_tf32_where_the_gpu_has_it(name: str) -> None:
    dev = gpu(name)
    assert costing.dtypes(FP32, dev) == ("fp32", "tf32")
    # a large square GEMM is compute-bound: its seconds are its FLOPs at the TF32 peak's achieved share
    n = 16384
    t = compute.gemm_seconds(n, n, n, dev, "tf32", 4)
    assert t == pytest.approx(2 * n**3 / (compute.GEMM_EFFICIENCY * dev.peak_flops["tf32"]))
    assert t < compute.gemm_seconds(n, n, n, dev, "fp32", 4)


@pytest.mark.parametrize("name", ["V100-32GB", "RTX-4090"])
def test_fp32_gemms_run_at_the_fp32_peak_without_tf32(name: str) -> None:
    dev = gpu(name)
    assert "tf32" not in dev.peak_flops
    assert costing.dtypes(FP32, dev) == ("fp32", "fp32")


def test_a_layer_in_fp32_prices_its_gemms_at_tf32_and_its_elementwise_at_4_bytes() -> None:
    a100 = gpu("A100-80GB")
    without = replace(a100, peak_flops={k: v for k, v in a100.peak_flops.items() if k != "tf32"})
    _, gemm = costing.dtypes(FP32, a100)
    tf32 = compute.layer_times(LLAMA, 4096, 1, 1, a100, "fp32", flash=True, gemm_dtype=gemm)
    fp32 = compute.layer_times(LLAMA, 4096, 1, 1, without, "fp32", flash=True,
                               gemm_dtype=costing.dtypes(FP32, without)[1])
    # compute-bound GEMMs: the time ratio is the peaks' ratio (156 / 19.5 = 8 on an A100)
    assert fp32.gemm / tf32.gemm == pytest.approx(a100.peak_flops["tf32"] / a100.peak_flops["fp32"], rel=0.01)
    assert tf32.elementwise == fp32.elementwise  # memory-bound, 4-byte tensors either way
    bf16 = compute.layer_times(LLAMA, 4096, 1, 1, a100, "bf16", flash=True)
    assert bf16.elementwise < 0.6 * tf32.elementwise  # 2-byte tensors (the 1-byte masks stay)


def test_an_fp32_plan_on_an_a100_is_priced_at_tf32() -> None:
    mc = costing.machine("A100-80GB", 1)
    mc_no_tf32 = replace(mc, cluster=replace(mc.cluster, device=replace(
        mc.cluster.device, peak_flops={k: v for k, v in mc.cluster.device.peak_flops.items() if k != "tf32"})))
    shape, lay = model_shape("gpt2"), Layout(1, 1, 1, 8, precision="fp32")
    fast = costing.step_times(shape, 1024, 8, lay, mc)["compute"]
    slow = costing.step_times(shape, 1024, 8, lay, mc_no_tf32)["compute"]
    # the whole difference is the GEMMs' (layers and output layer; forward + 2 x backward), nothing else
    a, b = mc.cluster.device, mc_no_tf32.cluster.device
    launch = mc.profile.launch_per_layer_s
    layer = (compute.layer_times(shape, 1024, 8, 1, b, "fp32", False, True, launch, gemm_dtype="fp32").gemm
             - compute.layer_times(shape, 1024, 8, 1, a, "fp32", False, True, launch, gemm_dtype="tf32").gemm)
    head = (compute.logits_seconds(shape, 1024, 8, 1, b, "fp32")
            - compute.logits_seconds(shape, 1024, 8, 1, a, "fp32", gemm_dtype="tf32"))
    assert slow - fast == pytest.approx(3 * (shape.layers * layer + head), rel=1e-9)
    assert head > 0 and layer > 0
