"""Build it yourself (notebook 03): one transformer layer with tensor AND sequence parallelism (Megatron-style).

Korthikanti et al., "Reducing Activation Recomputation in Large Transformer Models", 2022, section 4.2.2. Outside
the tensor-parallel regions (LayerNorms, residual adds, dropout) each rank holds only s/t tokens; before a
column-parallel linear the sequence is all-gathered (g; its backward reduce-scatters), after a row-parallel
linear it is reduce-scattered (g-bar; its backward all-gathers).

``block`` is labkit's pre-norm layer (``labkit.rig.model.Block``, causal attention, no dropout here): ``ln_1``,
``attn.c_attn`` (rows: q of every head, then k, then v; head j's rows are j*d to (j+1)*d within each third),
``attn.core``, ``attn.c_proj``, ``ln_2``, ``mlp.c_fc``, GELU, ``mlp.c_proj``. Its forward is
``x = x + attn(ln_1(x)); x + mlp(ln_2(x))`` on x of shape (b, s, h): the SEQUENCE IS DIM 1. Rank r holds heads
r*a/t to (r+1)*a/t, the r-th contiguous block of the MLP's inner features, and tokens r*s/t to (r+1)*s/t.
Every function runs inside a rank of a real gloo group (``torch.distributed`` is initialised); checked on 2 and 4
ranks with shapes drawn per run. gloo's ``dist.all_gather_into_tensor`` and ``dist.reduce_scatter_tensor`` cut
dim 0: move the sequence there (``x.transpose(0, 1).contiguous()``) and back.
Check it with ``build.check_build("03.build.sp_block", path)``; replace each ``raise NotImplementedError``.
"""

from __future__ import annotations

import torch
import torch.distributed as dist  # noqa: F401 - you will need it
import torch.nn.functional as F  # noqa: F401 - you will need it
from torch import nn


class GatherSequence(torch.autograd.Function):
    """g: (b, s/t, h) -> (b, s, h), every rank's tokens in rank order; backward: the conjugate."""

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError


class ReduceScatterSequence(torch.autograd.Function):
    """g-bar: (b, s, h) partial sums -> (b, s/t, h), summed over ranks, this rank's tokens; backward: the conjugate."""

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError


class SequenceParallelBlock(nn.Module):
    """This rank's part of ``block``, with parameters named as the block's: ``ln_1.weight``, ``ln_1.bias``,
    ``attn.c_attn.weight`` (q, k, v rows of this rank's heads: (3h/t, h)), ``attn.c_attn.bias``,
    ``attn.c_proj.weight`` (its columns of those heads: (h, h/t)), ``attn.c_proj.bias`` (whole), ``ln_2.*``,
    ``mlp.c_fc.*`` (rank's block of rows), ``mlp.c_proj.weight`` (rank's block of columns), ``mlp.c_proj.bias``."""

    def __init__(self, block: nn.Module, rank: int, world: int) -> None:
        super().__init__()
        raise NotImplementedError

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(b, s/t, h), this rank's tokens -> (b, s/t, h): the block's output for the same tokens."""
        raise NotImplementedError

    def allreduce_replicated_grads(self) -> None:
        """After backward: make every replicated parameter's gradient the whole layer's (which ones see only this
        rank's tokens?)."""
        raise NotImplementedError
