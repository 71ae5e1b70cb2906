"""Build it yourself (notebook 05): selective activation recompute (Korthikanti et al. 2022, section 5).

A transformer layer keeps sbh(34 + 5as/h) bytes for backward at 16 bits; the 5as^2b part is the attention core's
(the scores, the softmax, its dropout mask), and it is cheap to recompute: no weights, two matmuls. Selective
recompute keeps every linear layer's input and recomputes only the core in backward.

``block`` is labkit's pre-norm layer (``labkit.rig.model.Block``); its plain forward is::

    a = block.attn
    y = block.ln_1(x)                                    # (b, s, h)
    q, k, v = a.c_attn(y).split(h, dim=2)                # each (b, s, h)
    q, k, v = (t.view(b, s, a.n_head, h // a.n_head).transpose(1, 2) for t in (q, k, v))
    y = a.core(q, k, v).transpose(1, 2).contiguous().view(b, s, h)   # the attention core
    x = x + a.resid_drop(a.c_proj(y))
    return x + block.mlp(block.ln_2(x))

Write ``selective_forward(block, x)``: the same values, bit for bit (dropout is on: the recomputation must draw
the same masks), with only the attention core recomputed in backward (``torch.utils.checkpoint``). Check it with
``build.check_build("05.build.selective_recompute", path)``.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint  # noqa: F401 - you will need it


def selective_forward(block: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """``block(x)`` with the attention core (``block.attn.core``) recomputed in backward, the rest kept."""
    raise NotImplementedError
