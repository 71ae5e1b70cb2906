"""Build it yourself, notebook 02: ZeRO stage 2 (Rajbhandari et al., "ZeRO", SC 2020, section 5.2): the
gradients sharded too, each reduced to its owner as backward produces it, graded on 2 and 4 real ranks against
torch's own AdamW with hyperparameters drawn per run.

The same run, record and judge as ZeRO-1 (:mod:`labkit.practice.build.zero1`), plus one measurement: after
backward, the model's parameters hold no gradient (every p.grad freed by the hook), so a rank keeps 4 Psi / N
bytes of gradients (its shard's) where stage 1 keeps 4 Psi; traffic stays 2 Psi per step (Psi reduced to the
owners, Psi all-gathered). Bugs named besides ZeRO-1's: full gradients kept after backward, and slices reduced
to the wrong rank (one rank's shard right, the others' not).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from labkit.practice.build import records
from labkit.practice.build.harness import BuildExercise, register_build
from labkit.practice.build.zero_common import draw, zero_rank
from labkit.practice.build.zero_diagnose import bounds_of
from labkit.practice.build.zero_judge import judge as judge_zero
from labkit.practice.coding import Case

KEY = "02.build.zero2"
TIMEOUT_S = 30.0  # per world size: a step of the tiny MLP takes milliseconds; a hang is stopped here
CLS = "Zero2AdamW"


def collect(path: Path, params: dict) -> dict[str, Any]:
    """(UNTRUSTED side.) The optimizer on each world size (the first run's rank 0 answers ``shard_bounds``)."""
    return {"runs": [records.ranks(zero_rank, n, path, timeout=TIMEOUT_S, cls=CLS, params={
        **params, "bounds": bounds_of(params) if i == 0 else []}) for i, n in enumerate(params["worlds"])]}


def judge(record: dict, params: dict) -> list[Case]:
    """(TRUSTED side.) The cases of a ZeRO-2 record."""
    return judge_zero(record, params, stage=2, cls=CLS)


register_build(BuildExercise(
    key=KEY, stub="zero2.py",
    task="Write shard_bounds(numel, rank, world_size) -> (start, end, padded) and class Zero2AdamW(params, lr, "
         "betas, eps, weight_decay) with .optimizer (a torch.optim.AdamW over this rank's shard), a post-accumulate-"
         "grad hook per parameter that reduces each slice of its gradient to the slice's owner and frees p.grad, "
         "and .step(): average, AdamW on the shard, all-gather, zero the shard's gradient. Checked on 2 and 4 ranks "
         "with lr, betas, eps and weight decay drawn per run.",
    draw=draw, collect=collect, judge=judge,
    hint=("Which rank needs which slice of a parameter's gradient, and who may forget it afterwards?",
          "In the hook: for each owner whose shard overlaps the parameter, dist.reduce(piece, dst=owner); the "
          "owner adds it into its shard's .grad; then p.grad = None."),
    worked="Shard as in ZeRO-1 (padded flat vector, rank r owns [r*S, (r+1)*S)), with a zero gradient of S "
           "elements on the shard. Hook on parameter p at flat offset o: for each owner, the overlap [lo, hi) of "
           "[o, o + p.numel()) with the owner's shard; piece = p.grad.flatten()[lo-o:hi-o].clone(); "
           "dist.reduce(piece, dst=owner); the owner adds piece into shard.grad[lo-start:hi-start]; then "
           "p.grad = None. step(): shard.grad /= N, AdamW step, dist.all_gather_single the shards, copy them into "
           "the parameters, shard.grad.zero_().",
))
