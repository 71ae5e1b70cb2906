"""What a real training step holds: bytes by category, tensor by tensor, layer by layer, and its FLOPs.

Works on the lab's TinyGPT and on any ``nn.Module`` a user brings (a transformers model
included): ``measure_model(model, batch)`` or ``measure_step(Trainer(model=..., data=...))``.
Everything is read off a real step of a real model:

* parameters, gradients and optimizer states are summed over distinct storages
  (tied weights and views counted once); activations are the tensors autograd saves for
  backward, attributed to the module that saved them, and to a layer when that module sits
  in the model's list of repeated blocks (``labkit.measure.saved``, ``labkit.rig.blocks``);
* the memory of each phase of the step comes from torch's own ``MemTracker``, and the
  whole-step peak, optimizer step included, from ``labkit.measure.peak``;
* FLOPs come from torch's ``FlopCounterMode``, taught the CPU flash kernel (``labkit.measure.flops``).

The names other modules import from here (``SavedTensor``, ``StepMemory``, ``ModuleHooks``,
``SavedTensorRecorder``, ``unique_bytes``, ``optimizer_bytes``, ``phase_memory``,
``peak_step_bytes``, ``measure_flops``, ...) are re-exported from those modules.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn as nn

from labkit.errors import LabkitError, require_positive
from labkit.measure.flops import StepFlops, fused_training_flops, measure_flops, register_cpu_flash_formulas
from labkit.measure.peak import (
    CATEGORIES,
    PHASES,
    LiveBytes,
    WholeStepPeak,
    memtracker_peak,
    peak_step_bytes,
    phase_memory,
    whole_step_peak,
)
from labkit.measure.saved import (
    SHARED,
    ModuleHooks,
    SavedTensor,
    SavedTensorRecorder,
    StepMemory,
    optimizer_bytes,
    unique_bytes,
)
from labkit.rig.step import StepHooks, training_step
from labkit.rig.train import Batch, LossFn, Trainer, batch_tensors, blocks_of

__all__ = [
    "CATEGORIES", "PHASES", "SHARED", "LiveBytes", "ModuleHooks", "SavedTensor", "SavedTensorRecorder",
    "StepFlops", "StepMemory", "WholeStepPeak", "fused_training_flops", "measure_flops", "measure_model",
    "measure_step", "memtracker_peak", "optimizer_bytes", "peak_step_bytes", "phase_memory",
    "register_cpu_flash_formulas", "unique_bytes", "whole_step_peak",
]


def measure_step(trainer: Trainer, step: int | None = None) -> StepMemory:
    """Run one real training step and return what it held.

    Activations are those saved by the forward pass of this step; gradients are
    read after backward; optimizer states after the optimizer step (the first step
    creates them). The trainer's state advances exactly as ``trainer.step`` would.
    """
    model = trainer.model
    recorders: list[SavedTensorRecorder] = []
    grads: list[int] = []

    def record(batch: Batch) -> SavedTensorRecorder:
        recorders.append(SavedTensorRecorder(model, exclude=tuple(batch_tensors(batch)), blocks=blocks_of(trainer)))
        return recorders[0]

    def read_grads(_: torch.Tensor) -> None:
        grads.append(unique_bytes(p.grad for p in model.parameters()))

    training_step(trainer, step, StepHooks(forward=record, after_backward=read_grads))
    rec = recorders[0]
    states, bookkeeping = optimizer_bytes(trainer.optimizer)
    return StepMemory(unique_bytes(model.parameters()), grads[0], states, bookkeeping, rec.saved, rec.batch_bytes)


def measure_model(model: nn.Module, batch: Batch | Callable[[int], Batch], *,
                  optimizer: torch.optim.Optimizer | None = None, loss: LossFn | None = None,
                  precision: str = "fp32", blocks: str | None = None, warmup: int = 1) -> StepMemory:
    """One real step of a user's model: parameters, gradients, optimizer states, activations per layer.

    ``batch`` is what the model takes (a dict of keyword arguments for transformers, with
    ``labels`` so that it returns its loss, or ``(x, y)``), ``loss`` a function ``(model, batch)``
    when the model does not return one. ``warmup`` steps run first so the optimizer states exist.
    """
    require_positive("warmup", warmup)  # at least one step, so the optimizer states exist to be measured
    trainer = Trainer(model=model, data=batch, optimizer=optimizer, loss=loss, precision=precision, blocks=blocks)
    try:
        trainer.step()  # the first warm-up step: a batch the model cannot take fails here, in one line
    except (RuntimeError, TypeError, ValueError, IndexError) as err:
        first = str(err).splitlines()[0] if str(err) else ""
        raise LabkitError(f"batch must be what the model takes: its first step raised {type(err).__name__}: "
                          f"{first}"[:300]) from None
    for _ in range(warmup - 1):
        trainer.step()
    return measure_step(trainer)
