"""WRONG on purpose (the all-reduce runs on the gradient view as it comes, without .contiguous()).

Adapted from the reference solution of 03.build.tp_layers.

Shoeybi et al., "Megatron-LM", 2019, section 3: f is the identity in forward and an all-reduce in backward
(before a column-parallel linear, every rank needs all of x, and x's gradient is the sum of every rank's
part); g is its conjugate, an all-reduce in forward and the identity in backward (after a row-parallel
linear, the partial outputs add up; the gradient of a sum reaches each addend unchanged).
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F


class CopyToParallel(torch.autograd.Function):
    """Megatron's f: identity forward, all-reduce (sum) of the gradient backward."""

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        dist.all_reduce(grad)
        return grad


class ReduceFromParallel(torch.autograd.Function):
    """Megatron's g: all-reduce (sum) forward, identity backward."""

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        out = x.contiguous().clone()
        dist.all_reduce(out)
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        return grad


def column_shard(weight: torch.Tensor, bias: torch.Tensor, rank: int, world: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Rank ``rank``'s output features: rows of ``weight`` ([out, in]) and the matching bias entries."""
    return weight.chunk(world, dim=0)[rank].clone(), bias.chunk(world, dim=0)[rank].clone()


def row_shard(weight: torch.Tensor, bias: torch.Tensor, rank: int, world: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Rank ``rank``'s input features: columns of ``weight``; the bias whole (added once, after the sum)."""
    return weight.chunk(world, dim=1)[rank].contiguous(), bias.clone()


class ColumnParallelLinear(nn.Module):
    def __init__(self, dense: nn.Linear, rank: int, world: int) -> None:
        super().__init__()
        w, b = column_shard(dense.weight.detach(), dense.bias.detach(), rank, world)
        self.weight, self.bias = nn.Parameter(w), nn.Parameter(b)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(CopyToParallel.apply(x), self.weight, self.bias)


class RowParallelLinear(nn.Module):
    def __init__(self, dense: nn.Linear, rank: int, world: int) -> None:
        super().__init__()
        w, b = row_shard(dense.weight.detach(), dense.bias.detach(), rank, world)
        self.weight, self.bias = nn.Parameter(w), nn.Parameter(b)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ReduceFromParallel.apply(F.linear(x, self.weight)) + self.bias


class ParallelMLP(nn.Module):
    def __init__(self, fc1: nn.Linear, fc2: nn.Linear, rank: int, world: int) -> None:
        super().__init__()
        self.fc1 = ColumnParallelLinear(fc1, rank, world)
        self.fc2 = RowParallelLinear(fc2, rank, world)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.gelu(self.fc1(x)))
