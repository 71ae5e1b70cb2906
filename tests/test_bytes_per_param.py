"""One bytes-per-parameter source: every accounting of model states reads it, and no copy disagrees."""

import pytest

from labkit.predict import bytes_per_param as bpp
from labkit.predict import offload_model as om
from labkit.predict.conventions import BYTES_PER_PARAM, StateSetup, model_states
from labkit.predict.estimate import PRECISIONS, model_state_bytes
from labkit.predict.step_peak import StepShape, step_peak

K = bpp.MASTER + bpp.MOMENTS


def test_estimates_precisions_are_the_sources_elements():
    assert PRECISIONS["bf16-mixed"].weights + PRECISIONS["bf16-mixed"].grads + PRECISIONS["bf16-mixed"].optimizer \
        == bpp.ZERO.bytes_per_param == 16
    assert (PRECISIONS["fp32"].weights, PRECISIONS["fp32"].grads, PRECISIONS["fp32"].optimizer) == \
        (bpp.FP32, bpp.FP32, bpp.MOMENTS)
    assert PRECISIONS["bf16-mixed"].optimizer == K == 12
    assert sum(model_state_bytes(1, "bf16-mixed").values()) == bpp.ZERO.bytes_per_param


def test_the_planner_conventions_read_the_same_figures():
    one = StateSetup(10**6)
    assert model_states(one, "zero").total / 10**6 == bpp.ZERO.bytes_per_param == BYTES_PER_PARAM["zero"]
    stage3 = StateSetup(10**6, zero_stage=3, largest_layer=1)
    assert (model_states(stage3, "deepspeed").total - 4) / 10**6 == bpp.FP32_GRADIENTS.bytes_per_param == 18
    assert BYTES_PER_PARAM["deepspeed"] == bpp.FP32_GRADIENTS.bytes_per_param


def test_the_offload_models_and_the_measured_conventions_agree():
    assert om.ZERO3.gpu_bytes_per_param(1) == bpp.ZERO.bytes_per_param
    assert om.ZERO_INFINITY.nvme_bytes_per_param == bpp.FP32_COPY.bytes_per_param == 20
    assert om.ZERO_OFFLOAD.host_bytes_per_param == bpp.GRAD16 + K
    assert [c.bytes_per_param for c in bpp.STATE_CONVENTIONS] == [16, 18, 20]


@pytest.mark.parametrize("precision, states", [("fp32", bpp.FP32 + bpp.MOMENTS),
                                               ("bf16-mixed", bpp.WEIGHT16 + K)])
def test_the_step_peaks_optimizer_phase_holds_the_sources_bytes(precision, states):
    """Between steps ZeRO's count; while the lab's AdamW steps in bf16-mixed, the fp32 copy convention's 20."""
    n = 10**6
    s = StepShape((n,), 0.0, 1, 0.0, 0.0, 1, 1, 1, 1, 1, precision=precision, optimizer="fused")
    terms = {t.name: t.bytes for t in step_peak(s).phases["optimizer"]}
    held = sum(v for k, v in terms.items() if k != "step counters")
    assert held / n == states + (bpp.FP32 if precision == "fp32" else bpp.GRAD16)
    if precision == "bf16-mixed":
        lab = StepShape((n,), 0.0, 1, 0.0, 0.0, 1, 1, 1, 1, 1, precision=precision)
        at_step = {t.name: t.bytes for t in step_peak(lab).phases["optimizer"]}
        model_states_then = sum(v for k, v in at_step.items() if k not in ("step counters", "AdamW temporaries"))
        assert model_states_then / n == bpp.FP32_COPY.bytes_per_param
