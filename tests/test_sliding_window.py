"""Sliding-window attention (Mistral, Qwen2 with use_sliding_window): the activation model to the byte on the CPU."""

import itertools

import pytest
import torch

from labkit.errors import LabkitError
from labkit.measure import measure_step
from labkit.predict.activation_options import ActivationOptions, activation_bytes_hf
from labkit.rig.train import Trainer
from labkit.shapes.hf_models import build_model, small_spec

S = 16
WINDOWS = {"mistral": lambda w: {"sliding_window": w},
           "qwen2": lambda w: {"use_sliding_window": True, "sliding_window": w, "max_window_layers": 0}}


@pytest.mark.parametrize("family, window, precision, attention", list(itertools.product(
    WINDOWS, (8, 16, 32), ("fp32", "bf16-mixed"), ("eager", "sdpa"))), ids=lambda v: str(v))
def test_every_layer_to_the_byte_with_and_without_the_window(family, window, precision, attention):
    spec = small_spec(family, **WINDOWS[family](window))
    x = torch.randint(0, spec.shape.vocab, (2, S), generator=torch.Generator().manual_seed(0))
    t = Trainer(model=build_model(spec, attention, dropout=0.0), data={"input_ids": x, "labels": x},
                precision=precision)
    t.step()
    step = measure_step(t)
    e = 4 if precision == "fp32" else 2
    opt = ActivationOptions.for_model(spec, attention, act_bytes=e, dropout=0.0, seq=S)
    assert opt.window_mask == (window <= S)
    per_layer, outside = activation_bytes_hf(spec.shape, S, 2, opt, e)
    assert step.activations_per_layer() == [per_layer] * spec.shape.layers
    assert sum(step.outside_layers().values()) == outside


def test_qwen2_with_some_layers_windowed_is_refused_with_the_reason():
    spec = small_spec("qwen2", layers=4, use_sliding_window=True, sliding_window=8, max_window_layers=2)
    with pytest.raises(LabkitError, match="max_window_layers"):
        ActivationOptions.for_model(spec, "sdpa", seq=S)
