"""An independent correct 03.build.sp_block (written apart from the reference): list collectives and torch.cat on
the sequence dim, copies of the block's own modules with their shards, torch's fused causal attention."""

import copy

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn


def _gather(x):
    parts = [torch.empty_like(x) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, x.contiguous())
    return torch.cat(parts, dim=1)


def _scatter(x):
    parts = [c.contiguous() for c in x.chunk(dist.get_world_size(), dim=1)]
    out = torch.empty_like(parts[0])
    dist.reduce_scatter(out, parts)
    return out


class GatherSequence(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return _gather(x)

    @staticmethod
    def backward(ctx, grad):
        return _scatter(grad)


class ReduceScatterSequence(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return _scatter(x)

    @staticmethod
    def backward(ctx, grad):
        return _gather(grad)


def _cut(linear, rows=None, cols=None):
    new = copy.deepcopy(linear)
    w, b = linear.weight.detach(), linear.bias.detach()
    if rows is not None:
        w, b = w[rows], b[rows]
    if cols is not None:
        w = w[:, cols]
    new.weight = nn.Parameter(w.clone())
    new.bias = nn.Parameter(b.clone())
    return new


class SequenceParallelBlock(nn.Module):
    def __init__(self, block, rank, world):
        super().__init__()
        h = block.ln_1.normalized_shape[0]
        per = h // world
        mine = list(range(rank * per, (rank + 1) * per))
        self.heads = block.attn.n_head // world
        self.ln_1 = copy.deepcopy(block.ln_1)
        self.ln_2 = copy.deepcopy(block.ln_2)
        self.attn = nn.Module()
        self.attn.c_attn = _cut(block.attn.c_attn, rows=[i + j * h for j in range(3) for i in mine])
        self.attn.c_proj = _cut(block.attn.c_proj, cols=mine)
        inner = block.mlp.c_fc.out_features // world
        self.mlp = nn.Module()
        self.mlp.c_fc = _cut(block.mlp.c_fc, rows=list(range(rank * inner, (rank + 1) * inner)))
        self.mlp.c_proj = _cut(block.mlp.c_proj, cols=list(range(rank * inner, (rank + 1) * inner)))

    def forward(self, x):
        full = GatherSequence.apply(self.ln_1(x))
        b, s, _ = full.shape
        q, k, v = self.attn.c_attn(full).chunk(3, dim=-1)
        q, k, v = (t.reshape(b, s, self.heads, -1).permute(0, 2, 1, 3) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).permute(0, 2, 1, 3).reshape(b, s, -1)
        y = y @ self.attn.c_proj.weight.t()
        x = x + ReduceScatterSequence.apply(y) + self.attn.c_proj.bias
        z = F.gelu(self.mlp.c_fc(GatherSequence.apply(self.ln_2(x)))) @ self.mlp.c_proj.weight.t()
        return x + ReduceScatterSequence.apply(z) + self.mlp.c_proj.bias

    def allreduce_replicated_grads(self):
        for name, p in self.named_parameters():
            if name.startswith(("ln_1", "ln_2")) or name.endswith("c_proj.bias"):
                dist.all_reduce(p.grad)
