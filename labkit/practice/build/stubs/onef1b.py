"""Build it yourself: a 1F1B pipeline executor (Narayanan et al., "PipeDream", SOSP 2019; Megatron-LM, SC 2021).

Rank r holds stage r of a model cut into p = world_size stages. A step runs m micro-batches: stage r's forward
of micro-batch i needs stage r-1's output (received), its backward needs stage r+1's gradient (received). 1F1B
runs p - r forwards, then alternates one backward and one forward, then drains the backwards: rank 0 never holds
more than p micro-batches of activations (GPipe, all forwards first, holds m).

Use torch.distributed point-to-point calls (dist.isend / dist.recv; the group is already set up). Mind the order:
two ranks that both block in a send wait for each other forever.
Run the check in the notebook: build.check_build("02.build.onef1b", path).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.distributed as dist  # noqa: F401 - your executor needs it
from torch import nn


def schedule_1f1b(rank: int, world_size: int, m: int) -> list[tuple[str, int]]:
    """This rank's actions in order: ("F", i) forward or ("B", i) backward of micro-batch i, 1F1B's order."""
    raise NotImplementedError("schedule_1f1b")


def run_1f1b(stage: nn.Module, rank: int, world_size: int, m: int, inputs: list[torch.Tensor] | None,
             targets: list[torch.Tensor] | None, loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
             shape: tuple[int, ...]) -> list[float]:
    """One training step's forwards and backwards of ``stage`` over ``m`` micro-batches, in 1F1B order.

    ``inputs`` (rank 0 only, else None): the m micro-batches; ``targets`` (last rank only): their targets;
    ``shape``: the shape of the activation (and its gradient) passed between stages. Backward of
    ``loss_fn(output, target) / m`` on the last rank, so the gradients accumulated in ``stage``'s parameters are
    those of the whole batch's mean loss. Returns the m losses (unscaled floats) on the last rank, [] elsewhere.
    Dist calls: dist.isend(tensor, dst) (returns a work to .wait() later), dist.recv(tensor, src).
    """
    raise NotImplementedError("run_1f1b")
