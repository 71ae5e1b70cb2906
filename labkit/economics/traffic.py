"""HBM bytes of the matrix multiplies of one training step: the roofline view of a transformer.

A matrix multiply ``Y[m, n] = X[m, k] @ W[k, n]`` reads its two operands and writes its
result from and to HBM (Williams, Waterman and Patterson, "Roofline", CACM 2009: the bytes a
kernel moves to and from DRAM, beside its FLOPs). A training step runs each linear layer's
multiply four times with full recompute (Chen et al. 2016; Korthikanti et al. 2022):

* forward and its recompute: read X and W, write Y;
* backward, input gradient ``dX = dY @ W^T``: read dY and W, write dX;
* backward, weight gradient ``dW = X^T @ dY``: read X and dY, write dW.

So per linear layer and micro-batch: weights 3 reads + 1 write (``weight_bytes``, 8 B per
parameter in 16 bits) and activations 4 (mk + mn) elements (``activation_bytes``). Attention's
own two products (QK^T and AV) are counted as a fused kernel (FlashAttention, Dao et al.
2022) that reads Q, K, V and writes the output in the forward and recompute, and reads Q, K,
V, the output and its gradient and writes dQ, dK, dV in the backward; the s x s scores stay
on chip. Elementwise kernels (norms, activations, softmax outside the fused kernel) are not
counted: the figure is a lower bound of what the GPU moves through HBM.

The shapes are those of ``labkit.predict.estimate.forward_flops``: ``2 * sum(m k n)`` over the linear
layers plus attention's ``4 b s^2 h`` is its forward FLOPs (``tests/test_economics_traffic.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

from labkit.errors import require_positive
from labkit.shapes import ModelShape

PASSES = 4  # forward, recompute, input gradient, weight gradient (full recompute)


@dataclass(frozen=True)
class Gemm:
    """One matrix multiply X[m, k] @ W[k, n], ``count`` times per layer (or once outside the layers)."""

    name: str
    m: int
    k: int
    n: int
    count: int = 1

    @property
    def flops(self) -> float:
        return 2.0 * self.m * self.k * self.n * self.count


def layer_gemms(shape: ModelShape, seq: int, micro_batch: int) -> list[Gemm]:
    """The linear layers of one transformer block and the LM head, as (m, k, n) shapes."""
    require_positive("seq", seq)
    require_positive("micro_batch", micro_batch)
    m, h, f, kv = seq * micro_batch, shape.hidden, shape.ffn_size, shape.kv_hidden
    return [Gemm("qkv", m, h, h + 2 * kv, shape.layers), Gemm("attention out", m, h, h, shape.layers),
            Gemm("mlp up", m, h, f, shape.layers * (2 if shape.gated else 1)), Gemm("mlp down", m, f, h, shape.layers),
            Gemm("lm head", m, h, shape.vocab)]


@dataclass(frozen=True)
class GemmTraffic:
    """HBM bytes of one micro-batch's training step on one model replica, by kind."""

    weight_bytes: float  # weights read 3x, gradient written 1x, 16-bit
    activation_bytes: float  # GEMM inputs and outputs, 16-bit
    attention_bytes: float  # fused attention: Q, K, V, output (and gradients)

    @property
    def total_bytes(self) -> float:
        return self.weight_bytes + self.activation_bytes + self.attention_bytes


def gemm_traffic(shape: ModelShape, seq: int, micro_batch: int = 1, elem_bytes: int = 2,
                 recompute: bool = True) -> GemmTraffic:
    """HBM bytes the matrix multiplies of one micro-batch move (forward, recompute unless not, backward)."""
    require_positive("elem_bytes", elem_bytes)
    passes = PASSES if recompute else PASSES - 1
    gemms = layer_gemms(shape, seq, micro_batch)
    weights = sum(g.k * g.n * g.count for g in gemms) * passes * elem_bytes  # reads, and 1 gradient write
    acts = sum((g.m * g.k + g.m * g.n) * g.count for g in gemms) * passes * elem_bytes
    sb, h, kv = seq * micro_batch, shape.hidden, shape.kv_hidden
    forward = sb * (2 * h + 2 * kv)  # read Q, K, V; write O
    backward = sb * (2 * h + 2 * kv) + 2 * sb * h + sb * (h + 2 * kv)  # read Q,K,V,O,dO; write dQ,dK,dV
    attention = shape.layers * ((2 if recompute else 1) * forward + backward) * elem_bytes
    return GemmTraffic(float(weights), float(acts), float(attention))
