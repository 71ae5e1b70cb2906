"""A correct 1F1B executor written independently of the reference (instructor/build/onef1b.py): the order built
from warm-up, steady and cool-down counts, activations received with irecv, a FIFO stash, the sends' works waited
at the end. The tests require it to pass every visible and hidden case."""

from __future__ import annotations

from collections import deque

import torch
import torch.distributed as dist


def schedule_1f1b(rank, world_size, m):  # noqa: ANN001, ANN201
    warm = min(world_size - rank - 1, m)
    steady = m - warm
    order = [("F", i) for i in range(warm)]
    for k in range(steady):
        order += [("F", warm + k), ("B", k)]
    order += [("B", i) for i in range(steady, m)]
    return order


def run_1f1b(stage, rank, world_size, m, inputs, targets, loss_fn, shape):  # noqa: ANN001, ANN201
    stash, works, losses = deque(), [], []
    for phase, i in schedule_1f1b(rank, world_size, m):
        if phase == "F":
            if rank == 0:
                x = inputs[i]
            else:
                x = torch.zeros(shape)
                dist.irecv(x, src=rank - 1).wait()
                x.requires_grad_(True)
            y = stage(x)
            if rank == world_size - 1:
                loss = loss_fn(y, targets[i])
                losses.append(loss.item())
                y = loss.div(m)
            else:
                works.append(dist.isend(y.detach().clone(), dst=rank + 1))
            stash.append((x, y))
        else:
            x, y = stash.popleft()
            if rank == world_size - 1:
                torch.autograd.backward(y)
            else:
                g = torch.zeros(shape)
                dist.recv(g, src=rank + 1)
                torch.autograd.backward(y, g)
            if rank > 0:
                works.append(dist.isend(x.grad.clone(), dst=rank - 1))
    for w in works:
        w.wait()
    return losses
