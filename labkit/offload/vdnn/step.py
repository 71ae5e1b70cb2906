"""A training step (``labkit.rig.step``) with the offloader plugged into its hooks."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch

from labkit.offload.vdnn.offloader import Offloader
from labkit.rig.step import StepHooks, forward_backward, training_step
from labkit.rig.train import batch_tensors


def _offload_hooks(off: Offloader) -> StepHooks:
    """The offloader in a step: a fresh start with the batch left out, the prefetcher once forward ends."""

    @contextmanager
    def around(batch) -> Iterator[None]:
        off.begin_step(*batch_tensors(batch))
        try:
            yield
        finally:
            off.end_step()

    return StepHooks(around=around, after_forward=lambda _: off.begin_backward())


def offloaded_forward_backward(trainer, off: Offloader, step: int | None = None) -> torch.Tensor:
    """Loss of batch ``step`` with gradients in ``.grad``, saved activations offloaded by ``off``."""
    i = trainer.steps_done if step is None else step
    return forward_backward(trainer, i, _offload_hooks(off)).detach()


def offloaded_step(trainer, off: Offloader, step: int | None = None) -> float:
    """One full training step (optimizer included) with offload; returns the loss."""
    return training_step(trainer, step, _offload_hooks(off))
