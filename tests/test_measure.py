"""Measured beside predicted: real steps of the tiny GPT against labkit.predict.estimate."""

import pytest
import torch

from labkit.bench import MICRO_CONFIGS, MicroConfig
from labkit.measure import (
    SavedTensorRecorder,
    measure_flops,
    measure_step,
    optimizer_bytes,
    peak_step_bytes,
    phase_memory,
    unique_bytes,
)
from labkit.measure.compare import layer_comparison, memory_comparison, setup_for
from labkit.predict.estimate import training_flops
from labkit.rig.model import GPTConfig, TinyGPT
from labkit.rig.train import TrainConfig, Trainer
from labkit.shapes import ModelShape

assert len(MICRO_CONFIGS) >= 10
assert {c.precision for c in MICRO_CONFIGS} >= {"fp32", "bf16-mixed"}


def _run(c: MicroConfig, mask: str = "bool"):
    cfg = GPTConfig(vocab_size=35, seq_len=c.seq, n_layer=c.layers, n_head=c.heads, d_model=c.hidden,
                    attention=c.attention, mask=mask)
    step = measure_step(Trainer(TrainConfig(model=cfg, batch_size=c.batch, precision=c.precision)))
    mask_bytes = 1 if mask == "bool" else (4 if c.precision == "fp32" else 2)
    return step, setup_for(ModelShape.from_config(cfg), c.batch, c.precision, c.attention, mask_bytes)


@pytest.mark.parametrize("c", MICRO_CONFIGS, ids=lambda c: c.label())
def test_model_states_exact_and_activations_within_2_percent(c):
    step, setup = _run(c)
    comp = memory_comparison(step, setup)
    states = {r.name: r for r in comp.rows}
    for name in ("parameters", "gradients", "optimizer states"):
        assert states[name].measured == states[name].predicted, name
    from labkit.predict.estimate import estimate_memory

    per_layer = estimate_memory(setup).activations_per_layer_bytes
    for measured in step.activations_per_layer():
        assert abs(measured - per_layer) / per_layer < 0.02
    assert comp.worst_error < 0.02


@pytest.mark.parametrize("c", [c for c in MICRO_CONFIGS if c.attention == "explicit"][:3], ids=lambda c: c.label())
def test_every_korthikanti_term_matches_its_module_exactly(c):
    step, setup = _run(c)
    for row in layer_comparison(step, setup).rows:
        if row.name.startswith("ln_"):  # the input exactly, plus a mean and rstd per row
            stats = 2 * c.seq * c.batch * (4 if c.precision == "fp32" else 2)
            assert row.measured == row.predicted + stats
        else:
            assert row.measured == row.predicted, row.name


def test_float_masks_cost_full_width():
    c = MICRO_CONFIGS[0]
    step, setup = _run(c, mask="float")
    assert setup.mask_bytes == 4
    assert memory_comparison(step, setup).worst_error < 0.02


def test_mixed_precision_holds_16_bytes_per_parameter():
    c = MicroConfig(2, 64, 4, 32, 4, "bf16-mixed")
    step, setup = _run(c)
    assert step.model_states == 16 * setup.shape.params


def test_flops_counted_equal_narayanan_formula():
    cfg = GPTConfig(vocab_size=35, seq_len=24, n_layer=2, n_head=4, d_model=32)
    trainer = Trainer(TrainConfig(model=cfg, batch_size=3))
    assert measure_flops(trainer).total == training_flops(ModelShape.from_config(cfg), 24, 3)


def test_recorder_skips_parameters_and_batch():
    model = TinyGPT(GPTConfig(vocab_size=35, seq_len=8, n_layer=1, n_head=2, d_model=16))
    x = torch.zeros(2, 8, dtype=torch.long)
    with SavedTensorRecorder(model, exclude=(x, x)) as rec:
        model(x, x)[1].backward()
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    assert rec.batch_bytes == x.untyped_storage().nbytes()
    assert all(t.nbytes > 0 for t in rec.saved)
    assert not any(t.module.startswith("h.0.") and t.layer != 0 for t in rec.saved)
    assert len(params) > 0 and rec.stack == []


def test_phase_memory_shows_activations_then_gradients():
    trainer = Trainer(TrainConfig(model=GPTConfig(vocab_size=35, seq_len=16, n_layer=1, n_head=2, d_model=32),
                                  batch_size=2))
    trainer.step()
    phases = phase_memory(trainer)
    assert phases["before forward"]["activations"] == 0
    assert phases["after forward"]["activations"] > 0
    assert phases["after backward"]["gradients"] > 0
    assert phases["peak backward"]["temporaries"] > 0


def test_peak_holds_states_and_grows_with_the_batch():
    peaks = []
    for b in (2, 8):
        trainer = Trainer(TrainConfig(model=GPTConfig(vocab_size=35, seq_len=16, n_layer=1, n_head=2, d_model=32),
                                      batch_size=b))
        trainer.step()
        step = measure_step(trainer)
        peaks.append(peak_step_bytes(trainer))
        assert peaks[-1] >= step.parameters + step.optimizer + step.activations
    assert peaks[1] > peaks[0]


def test_unique_bytes_counts_each_storage_once_and_optimizer_bytes_splits_moments_from_counters():
    w = torch.zeros(10, 4)
    assert unique_bytes([w, w, w[2:], w.t(), None, torch.empty(0)]) == 160  # views and repeats: one storage
    assert unique_bytes([w, torch.zeros(3, dtype=torch.float16)]) == 166
    lin = torch.nn.Linear(4, 3)
    opt = torch.optim.AdamW(lin.parameters(), lr=1e-3)
    assert optimizer_bytes(opt) == (0, 0)  # no state before the first step
    lin(torch.ones(2, 4)).sum().backward()
    opt.step()
    n = sum(q.numel() for q in lin.parameters())
    assert optimizer_bytes(opt) == (8 * n, 4 * 2)  # two fp32 moments per parameter; one fp32 step per tensor
