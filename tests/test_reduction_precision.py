"""Mixed precision measured beside predicted: bytes exact, losses close to fp32, loss scaling doing its job."""

import pytest
import torch

from labkit.errors import LabkitError
from labkit.measure import measure_step
from labkit.reduction.precision import (
    LOSS_TOLERANCE,
    PRECISIONS,
    activation_prediction,
    dynamic_range,
    gaps_to_fp32,
    gradient_underflow,
    loss_curves,
    micro_model,
    overflow_recovery,
    precision_comparison,
    precision_runs,
    precision_trainer,
)
from labkit.rig.train import TrainConfig, Trainer
from labkit.shapes import ModelShape

CFG = micro_model(d_model=32, seq_len=16)
BATCH = 2
PER_PARAM = {"fp32": (4, 4, 8), "bf16-autocast": (4, 4, 8), "bf16-mixed": (2, 2, 12), "fp16-mixed": (2, 2, 12)}


@pytest.mark.parametrize("precision", PRECISIONS)
def test_model_states_and_activations_exact(precision):
    step = measure_step(precision_trainer(precision, CFG, BATCH))
    comp = precision_comparison(step, CFG, BATCH, precision)
    assert comp.worst_error == 0.0, str(comp)
    params = ModelShape.from_config(CFG).params
    w, g, k = PER_PARAM[precision]
    assert (step.parameters, step.gradients, step.optimizer) == (w * params, g * params, k * params)
    assert step.model_states == 16 * params


@pytest.mark.parametrize("precision", ["fp32", "bf16-mixed"])
def test_precision_trainer_measures_like_the_plain_trainer(precision):
    ours = measure_step(precision_trainer(precision, CFG, BATCH))
    core = measure_step(Trainer(TrainConfig(model=CFG, batch_size=BATCH, precision=precision)))
    assert ours.saved == core.saved
    assert ours.model_states == core.model_states


def test_autocast_saves_a_bf16_copy_of_each_weight_matrix():
    batch = 3  # b*s = 48 rows: no saved activation has a weight's shape
    trainer = precision_trainer("bf16-autocast", CFG, batch)
    step = measure_step(trainer)
    block = trainer.model.h[0]
    weight_shapes = {tuple(m.weight.t().shape) for m in block.modules() if isinstance(m, torch.nn.Linear)}
    copies = sum(t.nbytes for t in step.saved if t.layer == 0 and t.dtype == "bfloat16" and t.shape in weight_shapes)
    term = activation_prediction(CFG, batch, "bf16-autocast")["per layer"]["bf16 weight copies (autocast)"]
    assert copies == term == 2 * 12 * CFG.d_model**2
    assert activation_prediction(CFG, BATCH, "bf16-mixed")["per layer"]["bf16 weight copies (autocast)"] == 0


def test_16_bit_losses_within_tolerance_of_fp32_and_deterministic():
    runs = precision_runs(8, model=CFG, batch_size=BATCH)
    assert set(loss_curves(runs)) == set(PRECISIONS)
    assert runs["fp16-mixed"].skipped_steps == ()  # GradScaler's 2^16 does not overflow in these 8 steps
    for name, (step_gap, eval_gap) in gaps_to_fp32(runs).items():
        assert step_gap < LOSS_TOLERANCE and eval_gap < LOSS_TOLERANCE, name
    assert runs["fp32"].losses[-1] < runs["fp32"].losses[0]
    assert runs["bf16-autocast"].losses != runs["fp32"].losses  # 16-bit really ran
    again = precision_runs(8, ("bf16-autocast",), model=CFG, batch_size=BATCH)
    assert again["bf16-autocast"] == runs["bf16-autocast"]


def test_fp16_gradients_underflow_without_scaling_and_not_with():
    unscaled, scaled, huge = gradient_underflow((1.0, 2.0**16, 2.0**32), model=CFG)
    assert unscaled.elements == scaled.elements > 0
    assert unscaled.flushed_fraction > 0.05 and unscaled.norm_lost > 1e-3 and unscaled.overflowed == 0
    assert scaled.flushed_fraction < 1e-3 and scaled.norm_lost < 1e-6 and scaled.overflowed == 0
    assert huge.overflowed > 0  # too large a scale: the other failure
    # the 2^-12 multiplier puts most of the gradient under fp16's smallest normal, before any scale; flushing to zero
    # needs it under half the smallest subnormal, so fewer flush than sit below normal
    assert unscaled.below_normal_fraction > 0.5 and unscaled.flushed < unscaled.below_normal


def test_too_large_scale_overflows_then_halves_until_training_proceeds():
    trace = overflow_recovery(10, init_scale=2.0**24, model=CFG)
    assert trace.scales[0] == 2.0**24 and 0 in trace.skipped_steps
    for i in trace.skipped_steps:
        assert trace.scales[i + 1] == trace.scales[i] / 2
    first = trace.first_update
    assert 0 < first < 9 and trace.scales[first] < 2.0**24
    assert trace.losses[-1] < trace.losses[first] - 0.05  # updates apply again and the loss falls


def test_dynamic_range_from_finfo():
    fp32, bf16, fp16 = dynamic_range()
    assert (fp16.max, fp16.smallest_normal, fp16.smallest_subnormal) == (65504.0, 2.0**-14, 2.0**-24)
    assert bf16.smallest_normal == fp32.smallest_normal and bf16.smallest_subnormal == 2.0**-133
    for f, dtype in ((fp32, torch.float32), (bf16, torch.bfloat16), (fp16, torch.float16)):
        assert torch.tensor(f.smallest_subnormal, dtype=dtype) > 0
        assert torch.tensor(f.smallest_subnormal / 2, dtype=dtype) == 0  # flushes to zero
    assert bf16.decades > 70 > 13 > fp16.decades


def test_bad_input_names_the_allowed_values():
    with pytest.raises(LabkitError, match="precision must be one of fp32, bf16-autocast, bf16-mixed, fp16-mixed"):
        precision_trainer("fp8", CFG)
    with pytest.raises(LabkitError, match="precision must be one of"):
        activation_prediction(CFG, BATCH, "int8")
    with pytest.raises(LabkitError, match="mask must be bool"):
        activation_prediction(micro_model(mask="float"), BATCH, "fp32")
    with pytest.raises(LabkitError, match="scale must be a positive number"):
        gradient_underflow((-1.0,), model=CFG)
    with pytest.raises(LabkitError, match="runs must include fp32"):
        gaps_to_fp32({})
    with pytest.raises(LabkitError, match="dtype must be one of float32, bfloat16, float16"):
        dynamic_range(("int8",))


def test_share_text_rounds_to_what_no_cpu_changes():
    from labkit.reduction.precision import share_text

    assert [share_text(f) for f in (0.17814, 0.0128, 0.00128, 0.00011, 0.0)] == ["18%", "1%", "under 1%", "under 1%",
                                                                               "under 1%"]
    assert [share_text(f) for f in (0.99988, 0.991, 1.0)] == ["over 99%", "over 99%", "100%"]
