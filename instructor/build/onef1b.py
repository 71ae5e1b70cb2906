"""Reference solution of the build-it exercise 02.build.onef1b: a 1F1B executor over send/recv.

Instructors only (left out of the student release). The tests run it: it must pass every case.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.distributed as dist
from torch import nn


def schedule_1f1b(rank: int, world_size: int, m: int) -> list[tuple[str, int]]:
    """p - r forwards, then one backward and one forward at a time, then the remaining backwards."""
    warm = min(world_size - rank, m)
    order = [("F", i) for i in range(warm)]
    for i in range(m):
        order.append(("B", i))
        if warm + i < m:
            order.append(("F", warm + i))
    return order


def run_1f1b(stage: nn.Module, rank: int, world_size: int, m: int, inputs: list[torch.Tensor] | None,
             targets: list[torch.Tensor] | None, loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
             shape: tuple[int, ...]) -> list[float]:
    first, last = rank == 0, rank == world_size - 1
    stash: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
    sends, losses = [], []
    for phase, i in schedule_1f1b(rank, world_size, m):
        if phase == "F":
            if first:
                x = inputs[i]
            else:
                x = torch.empty(shape)
                dist.recv(x, rank - 1)
                x.requires_grad_()
            out = stage(x)
            if last:
                loss = loss_fn(out, targets[i])
                losses.append(float(loss.detach()))
                out = loss / m
            else:
                sends.append(dist.isend(out.detach().contiguous(), rank + 1))
            stash[i] = (x, out)
        else:
            x, out = stash.pop(i)
            if last:
                out.backward()
            else:
                grad = torch.empty(shape)
                dist.recv(grad, rank + 1)
                out.backward(grad)
            if not first:
                sends.append(dist.isend(x.grad.contiguous(), rank - 1))
    for work in sends:
        work.wait()
    return losses
