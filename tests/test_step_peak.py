"""The whole step's peak, predicted term by term, against a real CPU step of every shipped family."""

import itertools

import pytest
import torch

from labkit.errors import LabkitError
from labkit.measure import whole_step_peak
from labkit.predict.step_inputs import hf_step_shape
from labkit.predict.step_peak import StepShape, adamw_temporaries, cublas_workspace_bytes, step_peak
from labkit.rig.train import Trainer
from labkit.shapes.hf_models import build_model, small_spec
from labkit.shapes.tensors import parameter_tensors

FAMILIES = ("gpt2", "llama", "mistral", "qwen2")
# (batch, seq, config fields): the tests' micro models, where the optimizer step or backward at the loss peaks
SIZES = {"small batch": (2, 16, {}), "large vocabulary": (4, 64, {"vocab": 1024})}


def _trainer(family, attention, precision, cache, batch, seq, optimizer=None, **fields):
    spec = small_spec(family, use_cache=cache, **fields)
    x = torch.randint(0, spec.shape.vocab, (batch, seq), generator=torch.Generator().manual_seed(0))
    model = build_model(spec, attention, dropout=0.0)
    opt = optimizer(model) if optimizer else None
    return spec, Trainer(model=model, data={"input_ids": x, "labels": x}, precision=precision, optimizer=opt)


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("family, precision, attention, cache", list(itertools.product(
    FAMILIES, ("fp32", "bf16-mixed"), ("eager", "sdpa"), (False, True))), ids=lambda v: str(v))
def test_predicted_peak_within_3_percent_and_same_phase(family, precision, attention, cache, size):
    batch, seq, fields = SIZES[size]
    spec, t = _trainer(family, attention, precision, cache, batch, seq, **fields)
    t.step()
    measured = whole_step_peak(t)
    predicted = step_peak(hf_step_shape(spec, batch, seq, precision, attention, cache, 0.0))
    assert predicted.phase == measured.phase
    assert abs(measured.peak / predicted.peak - 1) < 0.03


@pytest.mark.parametrize("kind", ["foreach", "fused"])
def test_torch_adamw_foreach_and_fused_temporaries(kind):
    make = lambda m: torch.optim.AdamW(m.parameters(), lr=1e-3, **{kind: True})  # noqa: E731
    spec, t = _trainer("llama", "sdpa", "fp32", False, 2, 16, optimizer=make)
    t.step()
    measured = whole_step_peak(t)
    predicted = step_peak(hf_step_shape(spec, 2, 16, "fp32", "sdpa", False, 0.0, optimizer=kind))
    assert abs(measured.by_phase["optimizer"] / predicted.by_phase["optimizer"] - 1) < 0.01


def test_single_tensor_adamw_keeps_two_temporaries_and_the_previous_denominator():
    assert adamw_temporaries((10, 30, 5), "lab") == 4 * (2 * 30 + 10)
    assert adamw_temporaries((10, 30, 5), "foreach") == 4 * 45
    assert adamw_temporaries((10, 30, 5), "fused") == 0


def test_parameter_tensors_are_the_models_own_in_order():
    for family in FAMILIES:
        spec = small_spec(family)
        model = build_model(spec, "sdpa", device="meta")
        assert parameter_tensors(spec.shape) == tuple(p.numel() for p in model.parameters())


def test_every_term_is_named_and_cuda_adds_the_workspaces():
    spec = small_spec("llama")
    cpu = step_peak(hf_step_shape(spec, 2, 16, "bf16-mixed"))
    gpu = step_peak(hf_step_shape(spec, 2, 16, "bf16-mixed", device="cuda"), reserve_share=0.1)
    assert all(t.name and t.why for terms in cpu.phases.values() for t in terms)
    assert gpu.by_phase["optimizer"] - cpu.by_phase["optimizer"] == pytest.approx(
        2 * cublas_workspace_bytes(9) + 8 * 2 * 16 - 4 * len(parameter_tensors(spec.shape)))
    assert cpu.reserve.bytes == 0 and gpu.reserve.bytes == pytest.approx(0.1 * gpu.peak)


def test_bad_input_names_the_field():
    with pytest.raises(LabkitError, match="optimizer"):
        StepShape((4,), 1.0, 1, 1.0, 0.0, 1, 1, 4, 4, 4, optimizer="sgd")
    with pytest.raises(LabkitError, match="precision"):
        hf_step_shape(small_spec("llama"), 2, 16, "bf16-autocast")
