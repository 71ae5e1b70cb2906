"""FLOPs counted by torch equal the formula, fused attention on the CPU included."""

import pytest
import torch

from labkit.measure import fused_training_flops, measure_flops
from labkit.predict.estimate import training_flops
from labkit.rig.model import GPTConfig
from labkit.rig.train import TrainConfig, Trainer
from labkit.shapes import ModelShape
from labkit.shapes.hf_models import build_model, small_spec


def test_tiny_gpt_fused_attention_counted_exactly():
    cfg = GPTConfig(vocab_size=35, seq_len=24, n_layer=2, n_head=4, d_model=32, attention="fused", dropout=0.0)
    shape = ModelShape.from_config(cfg)
    measured = measure_flops(Trainer(TrainConfig(model=cfg, batch_size=3))).total
    assert measured == fused_training_flops(shape, 24, 3, "fused")
    assert measured > training_flops(shape, 24, 3)  # the flash backward recomputes Q K^T


@pytest.mark.parametrize("family", ["gpt2", "llama"])
@pytest.mark.parametrize("attention", ["eager", "sdpa"])
def test_transformers_models_counted_exactly(family, attention):
    spec = small_spec(family, use_cache=False)
    x = torch.randint(0, spec.shape.vocab, (2, 16))
    trainer = Trainer(model=build_model(spec, attention, dropout=0.0), data={"input_ids": x, "labels": x})
    assert measure_flops(trainer).total == fused_training_flops(spec.shape, 16, 2, attention)
