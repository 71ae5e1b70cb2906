"""Fake and real tensors count the same step to the byte: what makes a full-size fake measurement a measurement.

One small model per case (2 layers, width 64), built and stepped twice: for real, through the lab's own
``compare_model`` / ``compare_finetune`` (``measure_step`` and ``whole_step_peak``: two separate steps), and
under ``FakeTensorMode`` through ``labkit.measure.fake_step.record_step`` (one step, both counters). Every
category, every saved tensor, the whole-step peak and its phase must agree exactly. Cost: about 15 s on
2 cores, one process, no process group.
"""

from __future__ import annotations

import pytest

from labkit.measure.fake_build import finetune_trainer, full_trainer
from labkit.measure.fake_full import warm_up
from labkit.measure.fake_step import fake_keys, fake_mode, record_step
from labkit.measure.finetune import compare_finetune
from labkit.measure.own_model import compare_model
from labkit.predict.finetune import Finetune
from labkit.rig.step import forward_backward, optimizer_step
from labkit.shapes.hf_models import small_spec

B, S = 2, 32


def _fake(build, inside: bool = True):
    mode = fake_mode()
    with fake_keys():
        if inside:
            with mode:
                trainer = build(mode)
        else:
            trainer = build(mode)
        mode.__enter__()
        warm_up(trainer)
        try:
            return trainer, record_step(trainer)
        finally:
            mode.__exit__(None, None, None)


FULL = [("llama", "fp32", "sdpa", False), ("llama", "bf16-mixed", "sdpa", False), ("llama", "bf16-autocast", "sdpa",
        False), ("llama", "fp32", "eager", False), ("llama", "bf16-mixed", "eager", False),
        ("gpt2", "fp32", "sdpa", False), ("gpt2", "bf16-mixed", "eager", False), ("gpt2", "bf16-autocast", "sdpa",
        False), ("gpt2", "fp32", "sdpa", True), ("mistral", "bf16-mixed", "sdpa", False),
        ("qwen2", "fp32", "sdpa", False)]


@pytest.mark.parametrize(("family", "precision", "attention", "cache"), FULL)
def test_full_training_fake_equals_real(family, precision, attention, cache):
    spec = small_spec(family)
    real = compare_model(spec, B, S, precision, attention, cache, timed=False)
    _, rec = _fake(lambda _: full_trainer(spec, B, S, precision, attention, cache))
    m = rec.memory
    assert {k: v[0] for k, v in real.categories.items()} == {
        "parameters": m.parameters, "gradients": m.gradients, "optimizer states": m.optimizer,
        "activations": m.activations}
    assert [r[0] for r in real.layers] == m.activations_per_layer()
    assert (rec.peak.peak, rec.peak.phase, rec.peak.by_phase) == (
        real.peak["measured"], real.peak["phase"], real.peak["by_phase"]["measured"])


def test_full_training_with_dropout_and_checkpointing_fake_equals_real():
    """The fake path's own real run is the referee here (compare_model has no checkpointing)."""
    import contextlib

    spec = small_spec("gpt2")

    def run(fake: bool):
        ctx = (fake_mode(), fake_keys()) if fake else (contextlib.nullcontext(), fake_keys())
        with ctx[0], ctx[1]:
            tr = full_trainer(spec, B, S, "fp32", "sdpa", dropout=0.1, checkpointing=True)
            tr.step() if not fake else (forward_backward(tr, 0), optimizer_step(tr.optimizer))
            tr.steps_done = 1
            rec = record_step(tr)
        return [(t.module, t.shape, t.dtype, t.nbytes) for t in rec.memory.saved], rec.peak, rec.rounded_peak

    assert run(True) == run(False)


FINETUNE = [("llama", Finetune("lora", 4, ("q", "v")), "bf16-mixed"),
            ("llama", Finetune("lora", 4, ("q", "v", "down"), checkpointing=True), "bf16-mixed"),
            ("llama", Finetune("qlora", 4, ("q", "v")), "bf16-mixed"),
            ("llama", Finetune("qlora", 4, ("q", "k", "v", "o"), double_quant=True, checkpointing=True), "bf16-mixed"),
            ("gpt2", Finetune("lora", 4, ("qkv",)), "fp32"),
            ("gpt2", Finetune("qlora", 4, ("qkv", "up"), checkpointing=True), "bf16-mixed")]


@pytest.mark.parametrize(("family", "ft", "precision"), FINETUNE)
def test_finetune_fake_equals_real(family, ft, precision):
    spec = small_spec(family)
    real = compare_finetune(spec, ft, B, S, precision)
    trainer, rec = _fake(lambda mode: finetune_trainer(spec, ft, B, S, precision, mode), inside=False)
    from labkit.measure.finetune import _frozen_bytes
    from labkit.measure.saved import unique_bytes

    m = rec.memory
    with fake_keys():
        frozen = _frozen_bytes(trainer.model)
        adapters = unique_bytes(p for p in trainer.model.parameters() if p.requires_grad)
    assert {k: v[0] for k, v in real.categories.items()} == {
        "frozen base weights": frozen, "adapter parameters": adapters, "adapter gradients": m.gradients,
        "adapter optimizer states": m.optimizer, "activations": m.activations}
    assert (rec.peak.peak, rec.peak.phase) == (real.peak["measured"], real.peak["phase"])
