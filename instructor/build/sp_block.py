"""Reference solution of 03.build.sp_block: a Megatron layer with tensor AND sequence parallelism.

Korthikanti et al. 2022, section 4.2.2: outside the tensor-parallel regions (the LayerNorms, the residual adds,
dropout) each rank holds s/t tokens. Before a column-parallel linear, g all-gathers the sequence (its backward
reduce-scatters); after a row-parallel linear, g-bar reduce-scatters it (its backward all-gathers): the same bytes
as Megatron's two all-reduces, with the activations outside the linears cut by t. The sequence is dim 1 of
(b, s, h) here; gloo's reduce_scatter_tensor and all_gather_into_tensor cut dim 0, so the tensors go through as
(s, b, h). The LayerNorms and the row-parallel biases are replicated and see only this rank's tokens: their
gradients are summed over the ranks after backward.
"""

from __future__ import annotations

import math

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn


def _gather(x: torch.Tensor) -> torch.Tensor:
    world = dist.get_world_size()
    local = x.transpose(0, 1).contiguous()  # (s/t, b, h)
    out = torch.empty((local.shape[0] * world, *local.shape[1:]), dtype=x.dtype)
    dist.all_gather_into_tensor(out, local)
    return out.transpose(0, 1)  # (b, s, h)


def _reduce_scatter(x: torch.Tensor) -> torch.Tensor:
    world = dist.get_world_size()
    full = x.transpose(0, 1).contiguous()  # (s, b, h)
    out = torch.empty((full.shape[0] // world, *full.shape[1:]), dtype=x.dtype)
    dist.reduce_scatter_tensor(out, full)
    return out.transpose(0, 1)  # (b, s/t, h)


class GatherSequence(torch.autograd.Function):
    """All-gather along the sequence forward, reduce-scatter backward."""

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        return _gather(x)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        return _reduce_scatter(grad)


class ReduceScatterSequence(torch.autograd.Function):
    """Reduce-scatter along the sequence forward, all-gather backward."""

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        return _reduce_scatter(x)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        return _gather(grad)


def _param(t: torch.Tensor) -> nn.Parameter:
    return nn.Parameter(t.detach().clone().contiguous())


class SequenceParallelBlock(nn.Module):
    def __init__(self, block: nn.Module, rank: int, world: int) -> None:
        super().__init__()
        h, heads = block.attn.c_proj.out_features, block.attn.n_head
        self.n_head, self.width = heads // world, h // world
        self.ln_1, self.ln_2 = nn.LayerNorm(h), nn.LayerNorm(h)
        self.ln_1.load_state_dict(block.ln_1.state_dict())
        self.ln_2.load_state_dict(block.ln_2.state_dict())
        rows = torch.cat([torch.arange(self.width) + j * h + rank * self.width for j in range(3)])  # q, k, v
        cols = slice(rank * self.width, (rank + 1) * self.width)
        self.attn = nn.Module()
        self.attn.c_attn = nn.Linear(h, 3 * self.width)
        self.attn.c_attn.weight, self.attn.c_attn.bias = _param(block.attn.c_attn.weight[rows]), _param(
            block.attn.c_attn.bias[rows])
        self.attn.c_proj = nn.Linear(self.width, h)
        self.attn.c_proj.weight = _param(block.attn.c_proj.weight[:, cols])
        self.attn.c_proj.bias = _param(block.attn.c_proj.bias)
        ffn = block.mlp.c_fc.out_features // world
        self.mlp = nn.Module()
        self.mlp.c_fc = nn.Linear(h, ffn)
        self.mlp.c_fc.weight = _param(block.mlp.c_fc.weight.chunk(world, 0)[rank])
        self.mlp.c_fc.bias = _param(block.mlp.c_fc.bias.chunk(world, 0)[rank])
        self.mlp.c_proj = nn.Linear(ffn, h)
        self.mlp.c_proj.weight = _param(block.mlp.c_proj.weight.chunk(world, 1)[rank])
        self.mlp.c_proj.bias = _param(block.mlp.c_proj.bias)

    def _attention(self, y: torch.Tensor) -> torch.Tensor:
        b, s, _ = y.shape
        q, k, v = F.linear(y, self.attn.c_attn.weight, self.attn.c_attn.bias).split(self.width, dim=2)
        q, k, v = (t.view(b, s, self.n_head, -1).transpose(1, 2) for t in (q, k, v))
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(q.size(-1)))
        scores = scores.masked_fill(torch.ones(s, s, dtype=torch.bool).triu(1), float("-inf"))
        out = (scores.softmax(dim=-1) @ v).transpose(1, 2).contiguous().view(b, s, self.width)
        return F.linear(out, self.attn.c_proj.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + ReduceScatterSequence.apply(self._attention(GatherSequence.apply(self.ln_1(x)))) + self.attn.c_proj.bias
        y = F.gelu(self.mlp.c_fc(GatherSequence.apply(self.ln_2(x))))
        return x + ReduceScatterSequence.apply(F.linear(y, self.mlp.c_proj.weight)) + self.mlp.c_proj.bias

    def allreduce_replicated_grads(self) -> None:
        """The replicated parameters of the sequence-parallel regions: sum their gradients over the ranks."""
        for p in (*self.ln_1.parameters(), *self.ln_2.parameters(), self.attn.c_proj.bias, self.mlp.c_proj.bias):
            if p.grad is not None:
                dist.all_reduce(p.grad)
