"""The lab optimizer's host time (issue 29): its measured bare ops per tensor, the tensors counted, its pricing."""

from __future__ import annotations

import pytest

from labkit.hardware import gpu
from labkit.predict import profiles
from labkit.predict.step_seconds import optimizer_host_seconds, step_seconds
from labkit.shapes.hf_config import shape_from_hf_config
from labkit.shapes.tensors import parameter_tensors

H200 = gpu("H200")


def test_the_measurement_runs_and_returns_a_ratio_of_host_times() -> None:
    """The re-measure itself (its figure against the stored multiple is printed by ``labkit bench``, not asserted:
    a timing)."""
    from labkit.measure.optimizer_host import lab_adamw_host_ops

    r = lab_adamw_host_ops(True, tensors=10, rounds=1, calls=50)
    assert r["per_tensor_s"] > r["bare_op_s"] > 0 and r["ops"] > 1


@pytest.mark.parametrize("family", ["gpt2", "llama", "qwen2"])
def test_the_parameter_tensors_are_the_tiny_transformers_models_own(family: str) -> None:
    """Per layer: GPT-2 12 (ln_1, c_attn, c_proj, ln_2, c_fc, c_proj: weight and bias each), Llama 9 (seven
    projections, two norms), Qwen2 12 (q, k, v biases); outside: GPT-2 wte, wpe, ln_f's two; the Llamas the
    embedding, the final norm and an untied lm_head."""
    from labkit.shapes.hf_models import build_model, small_spec

    spec = small_spec(family, layers=3)
    per_layer, outside = {"gpt2": (12, 4), "llama": (9, 2), "qwen2": (12, 2)}[family]
    expected = 3 * per_layer + outside + (0 if spec.shape.tied else 1)
    model = build_model(spec, "sdpa", device="meta")
    assert len(parameter_tensors(spec.shape)) == expected == len(list(model.parameters()))


def test_the_gpu_check_models_tensors() -> None:
    counts = {m: len(parameter_tensors(shape_from_hf_config(m))) for m in ("gpt2-medium", "tinyllama-1.1b")}
    assert counts == {"gpt2-medium": 2 + 24 * 12 + 2, "tinyllama-1.1b": 1 + 22 * 9 + 2}


def test_the_lab_optimizer_is_the_slower_of_its_bytes_and_its_host_loop() -> None:
    gpt2, llama = shape_from_hf_config("gpt2-medium"), shape_from_hf_config("tinyllama-1.1b")
    host = optimizer_host_seconds(gpt2, "lab", True)
    assert host == pytest.approx(292 * profiles.LAB_ADAMW_HOST_OPS[True] * profiles.EAGER_BARE_OP_S)
    assert optimizer_host_seconds(gpt2, "lab", True, bare_op_s=2e-6) == pytest.approx(host * 2e-6 / 9.4e-6)
    assert optimizer_host_seconds(gpt2, "fused", True) == optimizer_host_seconds(gpt2, "foreach") == 0.0
    for shape in (gpt2, llama):
        nbytes = profiles.optimizer_seconds(shape.params, H200, "lab", True)
        st = step_seconds(shape, 1024, 4, H200, master_weights=True)
        assert st["optimizer"] == pytest.approx(max(nbytes, optimizer_host_seconds(shape, "lab", True)))
        serial = step_seconds(shape, 1024, 4, H200, master_weights=True, overlapped=False)
        assert serial["optimizer"] == pytest.approx(nbytes)  # a CPU: no bare-op launch_s to price it with
        assert step_seconds(shape, 1024, 4, H200, optimizer="fused")["optimizer"] == pytest.approx(
            profiles.optimizer_seconds(shape.params, H200, "fused"))
    # GPT-2 medium's 292 tensors, many of them 1024-element biases and norms: host-bound; TinyLlama's bytes win
    assert host > profiles.optimizer_seconds(gpt2.params, H200, "lab", True)
    assert optimizer_host_seconds(llama, "lab", True) < profiles.optimizer_seconds(llama.params, H200, "lab", True)


def test_the_h200_bare_op_is_the_gpu_checks_calibration_and_the_tiny_gpt_row_is_read_from_it() -> None:
    from labkit.advisor import reference_sets as rs
    from labkit.predict.allocator import records

    (cal,) = [r for r in records(rs.GPU_CHECK) if r.get("what") == "calibration"]
    assert profiles.EAGER_BARE_OP_S == pytest.approx(cal["launch_s"], rel=0.01)
    assert 0.005 < rs.tiny_gpt_measured_s() < 0.02  # a step of host time alone, milliseconds
