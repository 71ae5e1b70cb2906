"""Megatron 1D tensor parallelism of the tiny GPT on DTensor: bytes and collectives per rank, beside the formulas.

Shoeybi et al., "Megatron-LM", 2019, split each layer over t ranks: the QKV projection column-wise
(whole heads per rank), the attention output projection row-wise, the MLP's first linear column-wise
and its second row-wise; one all-reduce of b*s*h after each row-parallel linear (operator g, forward)
and one before each column-parallel linear (operator f, backward): 4 per layer per micro-batch.
Korthikanti et al., "Reducing Activation Recomputation in Large Transformer Models", 2022, add
sequence parallelism (SP): LayerNorms and dropouts run on s/t of the sequence, each all-reduce becomes
an all-gather plus a reduce-scatter of the same b*s*h, and a column-parallel linear keeps only its
sequence shard for backward, paying one more all-gather there (their section 4.2.2).

torch does the splitting (``parallelize_module`` with ``ColwiseParallel``, ``RowwiseParallel``,
``SequenceParallel`` on a 1-D cpu mesh). Written here, and why:

* ``c_attn`` is one fused Linear with [q; k; v] row blocks: a plain column split would give rank 0
  all of q and half of k. Its rows are permuted to [q_0; k_0; v_0; q_1; ...] (``qkv_rows``) before
  the split, so each rank holds whole heads of q, k and v, and each block's attention becomes a
  ``HeadParallelAttention``, which reads its head count off the local width. labkit.rig.model is not
  changed; gradients are permuted back before they are compared with its single-process TinyGPT.
* The tied embedding is split by vocabulary, as in Megatron: ``wte`` row-wise and ``lm_head``
  column-wise are both ``Shard(0)``, so they stay one DTensor; the loss is torch's ``loss_parallel``
  (Megatron's vocabulary-parallel cross-entropy). ``wpe`` and ``ln_f`` are replicated.
* Korthikanti's saved shard: torch's column-parallel linear would keep its all-gathered input. A
  ``saved_tensors_hooks`` pack hook (``SavedBytes``) keeps this rank's 1/t and all-gathers it back in backward.

Dropout must be 0 for outputs to equal one process: with dropout > 0 each rank draws its own masks
(Megatron coordinates them with an RNG tracker: one seed for replicated regions, one per rank for
split ones). Runs with dropout > 0 are used for bytes only, to see the masks in the formula.
"""

from labkit.intra_layer.megatron.model import (
    LR,
    MODEL,
    SAVED_SHARDS,
    HeadParallelAttention,
    build,
    check,
    model_config,
    qkv_rows,
)
from labkit.intra_layer.megatron.observe import KINDS, CollectiveCounter, Comm, SavedBytes
from labkit.intra_layer.megatron.prediction import (
    STEP_PARTS,
    Collective,
    activation_bytes,
    collectives,
    comm_table,
    compare,
    param_bytes,
)
from labkit.intra_layer.megatron.worker import RankResult, run_jobs, run_tp, single_process, train_jobs, train_tp

__all__ = [
    "Collective",
    "CollectiveCounter",
    "Comm",
    "HeadParallelAttention",
    "KINDS",
    "LR",
    "MODEL",
    "RankResult",
    "SAVED_SHARDS",
    "STEP_PARTS",
    "SavedBytes",
    "activation_bytes",
    "build",
    "check",
    "collectives",
    "comm_table",
    "compare",
    "model_config",
    "param_bytes",
    "qkv_rows",
    "run_jobs",
    "run_tp",
    "single_process",
    "train_jobs",
    "train_tp",
]
