"""Reference solution of 05.build.selective_recompute: only the attention core runs under checkpoint.

Korthikanti et al. 2022, section 5: the core (Q K^T, softmax, dropout, times V) holds the 5as^2b bytes and has no
weights, so it is recomputed; every linear layer keeps its input. Non-reentrant checkpoint keeps the core's inputs
(q, k, v: views of c_attn's output, kept anyway) and stashes the RNG state, so the replayed dropout mask equals the
first one and the gradients are bit-identical to no recompute.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint


def selective_forward(block: nn.Module, x: torch.Tensor) -> torch.Tensor:
    a = block.attn
    y = block.ln_1(x)
    b, s, h = y.shape
    q, k, v = a.c_attn(y).split(h, dim=2)
    q, k, v = (t.view(b, s, a.n_head, h // a.n_head).transpose(1, 2) for t in (q, k, v))
    y = checkpoint(a.core, q, k, v, use_reentrant=False).transpose(1, 2).contiguous().view(b, s, h)
    x = x + a.resid_drop(a.c_proj(y))
    return x + block.mlp(block.ln_2(x))
