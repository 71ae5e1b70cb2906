"""Build it yourself, notebook 02: ZeRO stage 1 (Rajbhandari et al., "ZeRO", SC 2020, section 5.1), graded on 2
and 4 real ranks against torch's own AdamW, with hyperparameters drawn per run.

The check is split by trust (:mod:`labkit.practice.build.harness`): :func:`collect` starts the ranks that import
the learner's module and records what they did (:func:`labkit.practice.build.zero_common.zero_rank`: the
parameters after each step, the gradient the inner AdamW saw, its state bytes, every collective with its size);
:func:`judge` computes torch's AdamW on the whole batch itself and compares
(:mod:`labkit.practice.build.zero_judge`). Checked per world size: optimizer bytes per rank equal to ZeRO-1's
8 Psi / N (padding included), traffic per step 2 Psi (a reduce-scatter and an all-gather of the padded flat
vector), AdamW fed this rank's shard of the mean gradient, every rank holding the same parameters, and the
parameters matching AdamW with the drawn lr, betas, eps and weight decay within ``zero_judge.TOL``. A failed run
gets one more case naming the bug the evidence shows (:mod:`labkit.practice.build.zero_diagnose`).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from labkit import dist as ldist
from labkit.practice.build import records
from labkit.practice.build.harness import BuildExercise, load_module, register_build
from labkit.practice.build.zero_common import draw, mlp, zero_rank
from labkit.practice.build.zero_diagnose import bounds_of
from labkit.practice.build.zero_judge import judge as judge_zero
from labkit.practice.coding import Case
from labkit.rig.step import optimizer_step

KEY = "02.build.zero1"
TIMEOUT_S = 30.0  # per world size: a step of the tiny MLP takes milliseconds; a hang is stopped here
CLS = "Zero1AdamW"


def collect(path: Path, params: dict) -> dict[str, Any]:
    """(UNTRUSTED side.) The optimizer on each world size (the first run's rank 0 answers ``shard_bounds``)."""
    return {"runs": [records.ranks(zero_rank, n, path, timeout=TIMEOUT_S, cls=CLS, params={
        **params, "bounds": bounds_of(params) if i == 0 else []}) for i, n in enumerate(params["worlds"])]}


def judge(record: dict, params: dict) -> list[Case]:
    """(TRUSTED side.) The cases of a ZeRO-1 record."""
    return judge_zero(record, params, stage=1, cls=CLS)


register_build(BuildExercise(
    key=KEY, stub="zero1.py",
    task="Write shard_bounds(numel, rank, world_size) -> (start, end, padded) and class Zero1AdamW(params, lr, "
         "betas, eps, weight_decay) with .optimizer (a torch.optim.AdamW over this rank's shard) and .step(): "
         "reduce-scatter the flat padded gradients, average, AdamW on the shard, all-gather the parameters. "
         "Checked on 2 and 4 ranks with lr, betas, eps and weight decay drawn per run.",
    draw=draw, collect=collect, judge=judge,
    hint=("Which part of the optimizer does rank r own, and what does it need from the other ranks to update it?",
          "Flatten and pad; reduce-scatter the gradients (then divide by N); AdamW on your shard; all-gather."),
    worked="Pad the flat parameters to a multiple of N; rank r owns elements [r*S, (r+1)*S), S = padded/N, and "
           "runs torch's AdamW (with every argument it was given) on that slice only: 8 Psi / N bytes of states per "
           "rank. Each step: flatten and pad the gradients, dist.reduce_scatter_single them (rank r gets the sum of "
           "slice r), divide by N once, step AdamW, dist.all_gather_single the updated slices and copy the flat "
           "vector back into the parameters.",
))


def bench_rank(rank: int, world_size: int, path: str, width: int = 512, steps: int = 5) -> dict[str, float]:
    """(Runs in a rank.) Seconds per step and optimizer bytes: the learner's ZeRO-1 beside torch's
    ``ZeroRedundancyOptimizer`` on the same MLP (shown, never asserted: the ranks share the machine's cores)."""
    from torch.distributed.optim import ZeroRedundancyOptimizer

    mod, out = load_module(path), {}
    for name in ("yours", "torch"):
        model = mlp(width, 0)
        params = list(model.parameters())
        opt = mod.Zero1AdamW(params, lr=1e-2) if name == "yours" else ZeroRedundancyOptimizer(
            params, optimizer_class=torch.optim.AdamW, lr=1e-2)  # fmt: skip
        x, y = torch.randn(64, 8), torch.randn(64, 8)
        start = time.perf_counter()
        for _ in range(steps):
            model.zero_grad(set_to_none=True)
            nn.functional.mse_loss(model(x), y).backward()
            if name == "torch":
                for p in params:
                    dist.all_reduce(p.grad)  # ZeroRedundancyOptimizer leaves the gradient reduction to DDP
                    p.grad /= world_size
            optimizer_step(opt, zero_grad=False)
        out[f"{name}_s_per_step"] = (time.perf_counter() - start) / steps
        inner = opt.optimizer if name == "yours" else opt.optim
        out[f"{name}_optimizer_bytes"] = float(sum(t.nbytes for st in inner.state.values() for t in st.values()
                                                   if torch.is_tensor(t) and t.numel() > 1))
    return out


def benchmark(path: str | Path, width: int = 512) -> dict[str, float]:
    """Rank 0's seconds per step and optimizer bytes, yours beside torch's ZeroRedundancyOptimizer (2 ranks).

    The ranks run the learner's module, so their report is read as plain data (``untrusted``)."""
    got = ldist.run(bench_rank, 2, timeout=60.0, untrusted=True, path=str(path), width=width)[0]
    return {k: float(v) for k, v in dict(got).items() if isinstance(v, int | float)}
