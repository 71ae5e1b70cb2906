"""Build it yourself (notebook 03): Megatron's tensor-parallel MLP, forward AND backward written by you.

Shoeybi et al., "Megatron-LM", 2019, section 3. Every function below runs inside a rank of a real gloo
group: ``torch.distributed`` is initialised for you (use ``dist.all_reduce``, ``dist.get_rank()``...).
It is checked on 2, 4 and 3 ranks, with shapes drawn per run: use the ``world`` you are given.
Check it with ``build.check_build("03.build.tp_layers", path)``; replace each ``raise NotImplementedError``.
"""

from __future__ import annotations

import torch
import torch.distributed as dist  # noqa: F401 - you will need it
import torch.nn as nn
import torch.nn.functional as F  # noqa: F401 - you will need it


class CopyToParallel(torch.autograd.Function):
    """Megatron's f, before a column-parallel layer: what does forward do to x, and backward to its gradient?"""

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError


class ReduceFromParallel(torch.autograd.Function):
    """Megatron's g, after a row-parallel layer: the conjugate of f."""

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError


def column_shard(weight: torch.Tensor, bias: torch.Tensor, rank: int, world: int) -> tuple[torch.Tensor, torch.Tensor]:
    """This rank's (weight, bias) of a column-parallel layer; weight is nn.Linear's [out_features, in_features].

    The shard is rank ``rank``'s contiguous block of ``world`` equal blocks (as ``tensor.chunk(world, dim)[rank]``
    cuts them), not every world-th row."""
    raise NotImplementedError


def row_shard(weight: torch.Tensor, bias: torch.Tensor, rank: int, world: int) -> tuple[torch.Tensor, torch.Tensor]:
    """This rank's (weight, bias) of a row-parallel layer: again rank ``rank``'s contiguous block."""
    raise NotImplementedError


class ColumnParallelLinear(nn.Module):
    """Holds this rank's shard of ``dense`` as parameters ``weight`` and ``bias``; forward uses f."""

    def __init__(self, dense: nn.Linear, rank: int, world: int) -> None:
        super().__init__()
        raise NotImplementedError

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError


class RowParallelLinear(nn.Module):
    """Holds this rank's shard of ``dense`` as parameters ``weight`` and ``bias``; forward uses g."""

    def __init__(self, dense: nn.Linear, rank: int, world: int) -> None:
        super().__init__()
        raise NotImplementedError

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError


class ParallelMLP(nn.Module):
    """fc2(gelu(fc1(x))) split over the ranks: ``self.fc1`` column-parallel, ``self.fc2`` row-parallel."""

    def __init__(self, fc1: nn.Linear, fc2: nn.Linear, rank: int, world: int) -> None:
        super().__init__()
        raise NotImplementedError

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError
