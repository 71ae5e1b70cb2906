"""One training step, with hooks at its phase boundaries: every loop in labkit runs this one.

A step is forward (inside the trainer's ``forward_context``: autocast where its precision
asks for it), backward (the trainer's ``backward``: a scaled loss in fp16), the optimizer's
step and ``zero_grad``, as in PyTorch's own training-loop recipe. What measures, offloads,
traces or kills a step plugs into it through :class:`StepHooks` instead of writing the loop
again, so that a measured step is the step the learner trains with: same autocast, same loss,
same order of frees.

A trainer is anything with ``model``, ``optimizer``, ``data(step) -> batch`` and
``steps_done``; ``compute_loss``, ``forward_context`` and ``backward`` are used when it has them
(``labkit.rig.train.Trainer`` has all three).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any

import torch

Batch = Any  # (x, y), a dict of keyword arguments (transformers' style), or one tensor
PHASES = ("forward", "backward", "optimizer")


@dataclass(frozen=True)
class StepHooks:
    """What runs at the boundaries of one step; every field is optional.

    ``around(batch)``: a context entered around forward *and* backward (saved-tensor hooks: a
    budget, a tracer, an offloader). ``forward(batch)``: a context around the forward pass only,
    outside autocast (a saved-tensor recorder, a FLOP counter). ``backward(loss)``: a context around
    the backward pass only. ``phase(name)``: told when each of ``PHASES`` begins, before the batch is
    read for "forward" (a memory tracker's phases). ``after_forward(loss)``, ``after_backward(loss)``
    and ``after_optimizer()`` run when those parts end (read the gradients, all-reduce them, die).
    """

    around: Callable[[Batch], AbstractContextManager] | None = None
    forward: Callable[[Batch], AbstractContextManager] | None = None
    backward: Callable[[torch.Tensor], AbstractContextManager] | None = None
    phase: Callable[[str], None] | None = None
    after_forward: Callable[[torch.Tensor], None] | None = None
    after_backward: Callable[[torch.Tensor], None] | None = None
    after_optimizer: Callable[[], None] | None = None
    optimizer: Callable[[], AbstractContextManager] | None = None


NO_HOOKS = StepHooks()


def loss_of(trainer, batch: Batch) -> torch.Tensor:
    """A trainer's loss on ``batch``: its ``compute_loss``, or ``model(x, y)[1]`` (a trainer-like object)."""
    compute = getattr(trainer, "compute_loss", None)
    return compute(batch) if compute is not None else trainer.model(*batch)[1]


def _context(make: Callable[..., AbstractContextManager] | None, *arg: object) -> AbstractContextManager:
    return make(*arg) if make is not None else nullcontext()


def _phase(hooks: StepHooks, name: str) -> None:
    if hooks.phase is not None:
        hooks.phase(name)


def forward_backward(trainer, step: int, hooks: StepHooks = NO_HOOKS) -> torch.Tensor:
    """Loss of batch ``step`` with gradients accumulated into ``.grad``: the step without its update."""
    trainer.model.train()
    _phase(hooks, "forward")
    batch = trainer.data(step)
    autocast = getattr(trainer, "forward_context", None)
    with _context(hooks.around, batch):
        with _context(hooks.forward, batch), (autocast() if autocast is not None else nullcontext()):
            loss = loss_of(trainer, batch)
        _phase(hooks, "backward")
        if hooks.after_forward is not None:
            hooks.after_forward(loss)
        backward = getattr(trainer, "backward", None)
        with _context(hooks.backward, loss):
            backward(loss) if backward is not None else loss.backward()
    if hooks.after_backward is not None:
        hooks.after_backward(loss)
    return loss


def optimizer_step(optimizer, hooks: StepHooks = NO_HOOKS, zero_grad: bool = True, scaler=None) -> None:
    """The step's second half: the optimizer's step (through ``scaler``, a ``GradScaler``, when given), then
    ``zero_grad``. Engines that run forward and backward themselves (a pipeline schedule, a layer-streaming
    offload) call it directly; ``zero_grad=False`` leaves the gradients for the caller to read."""
    _phase(hooks, "optimizer")
    with _context(hooks.optimizer):
        if scaler is None:
            optimizer.step()
        else:
            scaler.step(optimizer)
            scaler.update()
    if zero_grad:
        optimizer.zero_grad(set_to_none=True)
    if hooks.after_optimizer is not None:
        hooks.after_optimizer()


def training_step(trainer, step: int | None = None, hooks: StepHooks = NO_HOOKS, keep_grads: bool = False) -> float:
    """One full step on batch ``step`` (default: the trainer's next): forward, backward, update, zero_grad.

    Returns the loss. The loss tensor is released before the optimizer step, so a tracker of the
    whole step sees only what the update needs; ``steps_done`` advances as after ``Trainer.step``.
    ``keep_grads`` zeroes the gradients before forward instead of after the update, so that they
    can be read after the step (an engine's held bytes, a reference's gradients).
    """
    i = trainer.steps_done if step is None else step
    if keep_grads:
        trainer.optimizer.zero_grad(set_to_none=True)
    loss = forward_backward(trainer, i, hooks)
    value = loss.item()
    del loss
    optimizer_step(trainer.optimizer, hooks, zero_grad=not keep_grads)
    trainer.steps_done = i + 1
    return value


@dataclass
class Loop:
    """The smallest trainer ``training_step`` runs: a model, its optimizer and a batch function.

    For the reference runs of the engines (one process, one model); ``loss(model, batch)`` defaults
    to the tiny GPT's ``model(*batch)[1]``.
    """

    model: torch.nn.Module
    optimizer: Any
    data: Callable[[int], Batch]
    loss: Callable[[torch.nn.Module, Batch], torch.Tensor] | None = None
    steps_done: int = 0

    def compute_loss(self, batch: Batch) -> torch.Tensor:
        return self.loss(self.model, batch) if self.loss is not None else self.model(*batch)[1]
