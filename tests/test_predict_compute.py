"""One compute-time primitive: the advisor's kernels, notebook 02's stages, 04's ZeRO-Offload and 07's strategies
all price time with ``hardware.roofline_time`` at stated shares of the peaks (issue 23)."""

from __future__ import annotations

import pytest

from labkit import hardware
from labkit.economics import strategies
from labkit.errors import LabkitError
from labkit.offload import zero_offload
from labkit.predict import compute
from labkit.predict.estimate import training_flops
from labkit.shapes import model_shape

A100 = hardware.gpu("A100-80GB")


def test_gemm_is_the_roofline_at_the_kernel_efficiencies() -> None:
    m = n = k = 8192
    t = compute.gemm_seconds(m, n, k, A100)
    assert t == hardware.roofline_time(2 * m * n * k, 2 * 3 * m * n, A100, "bf16", compute.GEMM_EFFICIENCY,
                                       compute.HBM_EFFICIENCY)
    assert t == pytest.approx(2 * m * n * k / (A100.peak_flops["bf16"] * compute.GEMM_EFFICIENCY))  # compute-bound
    skinny = compute.gemm_seconds(8192, 8192, 1, A100)  # an outer product: memory-bound
    assert skinny == pytest.approx(2 * (8192 + 8192 + 8192**2) / (A100.memory_bandwidth * compute.HBM_EFFICIENCY))


def test_roofline_default_is_the_lower_bound_and_rejects_bad_shares() -> None:
    assert hardware.roofline_time(312e12, 0, A100) == pytest.approx(1.0)
    assert hardware.roofline_time(312e12, 0, A100, efficiency=0.5) == pytest.approx(2.0)
    for bad in (0, -0.1, 1.5, True, "x"):
        with pytest.raises(LabkitError, match="^efficiency must be a share of the peak in \\(0, 1\\]"):
            hardware.roofline_time(1, 1, A100, efficiency=bad)


def test_topics_time_compute_through_the_primitive() -> None:
    shape = model_shape("gpt2-xl")
    st = zero_offload.step_time(shape, "V100-32GB", micro_batch=8, mfu=0.4)
    v100 = hardware.gpu("V100-32GB")
    flops = training_flops(shape, shape.seq, 8, recompute="full")
    assert st.gpu_compute_s == compute.kernel_seconds(flops, 0.0, v100, "fp16", 0.4)
    p = strategies.plan("hbm", shape, "H100-80GB", gpus=8)
    peak = hardware.gpu("H100-80GB").peak_flops["bf16"]
    assert p.compute_s >= p.flop_s
    assert p.flop_s == pytest.approx(training_flops(shape, shape.seq, 1) * p.sequences_per_step / (8 * peak * 0.4))
