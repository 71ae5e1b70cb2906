"""ZeRO-DP on real process groups: DDP and stages 1-3, bytes held per rank and elements moved per step.

Rajbhandari et al., "ZeRO", SC 2020, shard data parallelism's model states over Nd ranks. Here
they are fp32 with AdamW: P = 4, G = 4, K = 8 bytes per parameter (two moments, no master copy);
per rank DDP holds (4+4+8)Psi, stage 1 4Psi + 4Psi + 8Psi/Nd, stage 2 4Psi + (4+8)Psi/Nd, stage 3
16Psi/Nd, and moves 2Psi elements per step (reduce-scatter + all-gather; an all-reduce of n counts
2n), 3Psi in stage 3. ``ddp`` is ``DistributedDataParallel``; ``zero1`` is ``ZeroRedundancyOptimizer``
over DDP, which keeps DDP's all-reduce and then *broadcasts* each updated parameter from its owner
(Psi more than the paper); ``zero3`` is FSDP2 ``fully_shard`` on each block and on the root, all
with ``reshard_after_forward=True`` so every group is gathered in forward and again in backward
(the paper's 3Psi; the root's default, False, would skip its backward gather). ``zero2`` is written
here: FSDP2 with ``reshard_after_forward=False`` still shards parameters at rest, which is stage 3
between steps. It keeps full parameters in one flat buffer, reduce-scatters a flat gradient, steps
AdamW on the local shard and all-gathers the parameters (the full gradient lives briefly after
backward; real ZeRO-2 reduces bucket by bucket during backward).

Collectives are counted by a ``TorchDispatchMode`` that sees every ``c10d::`` op, those the DDP
reducer issues from C++ included; ``crosscheck=True`` also counts the ``gloo:*`` events of a
torch.profiler run of the last step. They agree call for call, except that gloo has no
reduce-scatter: ``ProcessGroupGloo`` all-reduces a clone of the whole input and keeps its chunk, so
on gloo a reduce-scatter of n costs 2n (NCCL runs a real one). Dropout is 0 so that the ranks
together compute what one process computes on the full batch. The default model's tensors split
evenly over 2 and 4 ranks; ``predict`` gives torch's figures when they do not (FSDP2 pads dim 0 to
a multiple of Nd, ZeroRedundancyOptimizer assigns whole tensors greedily).
"""

from labkit.inter_layer.zero.comm import BACKENDS, CollectiveCounter, Comm, profiled_collectives, volume
from labkit.inter_layer.zero.engines import (
    CATEGORIES,
    LR,
    MODEL,
    STRATEGIES,
    FlatZero2,
    check,
    held_bytes,
    model_config,
)
from labkit.inter_layer.zero.prediction import Prediction, compare, predict
from labkit.inter_layer.zero.runs import run_jobs, run_strategies, run_strategy, single_process_losses
from labkit.inter_layer.zero.worker import RankResult, train_jobs, train_rank

__all__ = [
    "BACKENDS",
    "CATEGORIES",
    "CollectiveCounter",
    "Comm",
    "FlatZero2",
    "LR",
    "MODEL",
    "Prediction",
    "RankResult",
    "STRATEGIES",
    "check",
    "compare",
    "held_bytes",
    "model_config",
    "predict",
    "profiled_collectives",
    "run_jobs",
    "run_strategies",
    "run_strategy",
    "single_process_losses",
    "train_jobs",
    "train_rank",
    "volume",
]
