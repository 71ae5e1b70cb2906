"""torchtitan's op-level selective activation checkpointing (recompute ``op``): what it keeps and what it re-runs.

Not Korthikanti et al.'s selective recompute (``selective``: re-run the attention core). The policy is
torchtitan's (pytorch/torchtitan, ``torchtitan/parallelisms/parallelize_llama.py`` of December 2024, the
era of the benchmark's commit 9dec370; ``mode = 'selective'``, ``selective_ac_option = 'op'`` in
``train_configs/llama3_8b.toml``): every transformer block is one checkpoint region; inside it the outputs
of the ops in its save list (``aten.mm``, the flash and memory-efficient SDPA kernels,
``reduce_scatter_tensor``) are kept, except every second ``mm`` (counted afresh in each region), and every
other op is re-run in the backward: the norms, rotary, SiLU, the gate product, the residual adds.

Which matmuls are the even ones follows the model's code (``torchtitan/models/llama/model.py``):
``Attention.forward`` runs ``wq(x), wk(x), wv(x)`` then ``wo``, and ``FeedForward.forward`` runs
``w2(silu(w1(x)) * w3(x))``, so a Llama block's order is wq, wk, wv, wo, w1, w3, w2 and the 2nd, 4th and
6th (wk, wo, w3) are re-run. A block without a gate (separate q, k, v projections, then fc1, fc2, as a
torchtitan-style module would run them) re-runs k, the output projection and fc2.

The re-run element-wise kernels are counted as the uncompiled block launches them (the benchmark's 8B rows
ran without ``torch.compile``; ``norm_type = "rmsnorm"``, torch ops, not the fused kernel), each reading and
writing HBM (:func:`rerun_elementwise_bytes`), up to the last tensor the backward needs (torch's
``checkpoint`` stops its re-run there: the block's final residual add is not repeated).

Kept per layer, at e bytes per element (torch's ``create_selective_checkpoint_contexts`` caches every
output of a saved op; ``checkpoint`` keeps the region's input): the block input (b s h), the odd matmuls'
outputs, the SDPA output (b s h) and its log-sum-exp (fp32, one per row and head), and under sequence
parallelism the two reduce-scatters' outputs (b s h / t each). Only with the fused kernel: with explicit
attention the score products are ``bmm`` and the softmax is not saved, a different policy.
"""

from __future__ import annotations

from labkit.errors import LabkitError
from labkit.shapes import ModelShape

LABEL = "torchtitan op-level selective (every second matmul re-run)"


def block_matmuls(shape: ModelShape, rows: float, tp: int = 1) -> list[tuple[str, float, float, float]]:
    """A block's matmuls in the order it runs them (``torchtitan/models/llama/model.py``): (name, m, n, k) of
    (m x k) @ (k x n) on one of ``tp`` tensor-parallel GPUs (column-parallel q, k, v, up and gate; row-parallel
    output projection and down), ``rows`` = b s."""
    h, kv, f, t = shape.hidden, shape.kv_hidden, shape.ffn_size, tp
    attn = [("wq", rows, h / t, h), ("wk", rows, kv / t, h), ("wv", rows, kv / t, h), ("wo", rows, h, h / t)]
    mlp = ([("w1", rows, f / t, h), ("w3", rows, f / t, h), ("w2", rows, h, f / t)] if shape.gated
           else [("fc1", rows, f / t, h), ("fc2", rows, h, f / t)])
    return attn + mlp


def rerun_matmuls(shape: ModelShape, rows: float, tp: int = 1) -> list[tuple[str, float, float, float]]:
    """The matmuls the policy re-runs in the backward: every second one (torchtitan's ``mm_count % 2 == 0``)."""
    return block_matmuls(shape, rows, tp)[1::2]


def extra_flops_per_layer(shape: ModelShape, seq: int, micro_batch: int) -> float:
    """FLOPs one layer's backward repeats: 2 m n k for each re-run matmul (2 per multiply-add, Narayanan et al.
    2021). A Llama block: 2 b s h (kv + h + f)."""
    return sum(2.0 * m * n * k for _, m, n, k in rerun_matmuls(shape, seq * micro_batch))


def rerun_elementwise_bytes(shape: ModelShape, rows: float, e: int = 2, tp: int = 1, sp: bool = False) -> float:
    """HBM bytes of the element-wise kernels one layer re-runs, each kernel's reads plus writes, intermediates in
    fp32 (4 bytes) where torchtitan's code casts to float, ``rows`` = b s:

    * each RMSNorm (``torchtitan/models/norms.py``, ``RMSNorm``: ``_norm(x.float()).type_as(x) * weight``):
      the cast (e + 4), ``pow`` (4 + 4), ``mean`` (4), ``x * rsqrt`` (4 + 4), ``type_as`` (4 + e), ``* weight``
      (e + e): 28 + 4e bytes an element, twice a layer, on the b s h/t of a rank under sequence parallelism;
    * rotary on q and k (``apply_rotary_emb``: ``float()``, the complex product, ``type_as``): 16 + 2e an element;
    * ``repeat_kv`` of k and v where heads share them: each reads kv and writes h elements;
    * the attention output's ``transpose(1, 2).contiguous()`` copy (2e) and the residual add (3e);
    * ``silu(w1) * w3``: SiLU (2e) and the product (3e) on the MLP's hidden (GeLU, 2e, without a gate).
    """
    h, kv, f, t = shape.hidden, shape.kv_hidden, shape.ffn_size, tp
    wide = rows * h / (t if sp and t > 1 else 1)
    per_rank = rows / t
    norms = 2 * (28 + 4 * e) * wide
    rotary = (16 + 2 * e) * per_rank * (h + kv)
    repeat = 2 * e * per_rank * (kv + h) if kv != h else 0.0
    copies = 2 * e * per_rank * h + 3 * e * wide
    mlp = (5 if shape.gated else 2) * e * per_rank * f
    return norms + rotary + repeat + copies + mlp


def saved_bytes_per_layer(shape: ModelShape, seq: int, micro_batch: int, act_bytes: int = 2, tp: int = 1,
                          sp: bool = False, attention: str = "fused") -> float:
    """Bytes one layer keeps for its backward under the policy (module text): e b s h for the input (split t
    ways under sequence parallelism), e times each kept matmul's m x n output (the row-parallel ones are whole
    partial sums on every rank), e b s h / t for the SDPA output, 4 a s b / t for its fp32 log-sum-exp, and
    2 e b s h / t for the reduce-scatters' outputs under sequence parallelism. A Llama block at tp = 1:
    e b s h (4 + kv/h + f/h) + 4 a s b."""
    if attention != "fused":
        raise LabkitError(f"recompute 'op' needs attention fused: torchtitan's policy keeps the SDPA kernel's "
                          f"output (got attention {attention!r})")
    e, rows, h, t = act_bytes, seq * micro_batch, shape.hidden, tp
    kept = sum(m * n for _, m, n, _ in block_matmuls(shape, rows, tp)[0::2])
    split = t if sp and t > 1 else 1
    scattered = 2 * rows * h / t if sp and t > 1 else 0.0
    return e * (rows * h / split + kept + rows * h / t + scattered) + 4.0 * shape.heads * rows / t
