"""(Runs in a rank.) One pipeline-parallel run on torch's schedules, watched by the recorder."""

from __future__ import annotations

import os
from functools import partial
from typing import Any

import torch
import torch.distributed as dist

from labkit.inter_layer.pipeline.op_times import time_ops
from labkit.inter_layer.pipeline.recorder import Recorder
from labkit.inter_layer.pipeline.stages import LR, build_model, check_pipeline, lm_loss, model_config, split_stages
from labkit.rig.data import batches
from labkit.rig.step import optimizer_step
from labkit.sim import Action


def train_pipeline(rank: int, world_size: int, kind: str = "1f1b", microbatches: int = 4, steps: int = 1,
                   v: int = 1, model: dict[str, Any] | None = None, batch_size: int = 8, seed: int = 0,
                   lr: float = LR, op_rounds: int = 0) -> dict[str, Any]:
    """(Runs in a rank.) Train ``steps`` steps of the pipeline; this rank's losses, events, order and bytes.

    ``op_rounds`` > 0: afterwards each stage's forward and backward are timed alone that many rounds
    (``labkit.inter_layer.pipeline.op_times``), for a replay that load does not distort."""
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe, ScheduleInterleaved1F1B

    cfg, m, p = model_config(model), microbatches, world_size
    check_pipeline(kind, p, m, v, cfg, batch_size, steps)
    dev = torch.device("cpu")
    if dist.get_backend() == "nccl":  # under torchrun on GPUs (not tested here: one GPU cannot hold 2 NCCL ranks)
        dev = torch.device("cuda", int(os.environ.get("LOCAL_RANK", rank)))
        torch.cuda.set_device(dev)
    mods = [mod.to(dev) for mod in split_stages(build_model(cfg, seed), p * v)]
    mine = list(range(rank, p * v, p))
    stages = [PipelineStage(mods[s], s, p * v, dev) for s in mine]
    params = [w for s in mine for w in mods[s].parameters()]
    buffers = [b for s in mine for b in mods[s].buffers()]
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.0, foreach=False)
    rec = Recorder(params + buffers, dev)
    rec.instrument(stages)
    loss_fn = partial(rec.timed_loss, lm_loss)
    if kind == "interleaved":
        sched = ScheduleInterleaved1F1B(stages, m, loss_fn=loss_fn)
    else:
        sched = (ScheduleGPipe if kind == "gpipe" else Schedule1F1B)(stages[0], m, loss_fn=loss_fn)
    data, first, last = batches(batch_size, cfg.seq_len, seed), 0 in mine, p * v - 1 in mine
    losses, peaks, held_after = [], [], []
    for step in range(steps):
        x, y = (t.to(dev) for t in data(step))
        rec.begin_step(step, (x, y))
        mb_losses: list[torch.Tensor] = []
        sched.step(*((x,) if first else ()), **({"target": y, "losses": mb_losses} if last else {}))
        optimizer_step(opt)
        peaks.append(rec.peak)
        held_after.append(rec.live)  # 0 when backward released every saved tensor
        if last:
            losses.append(float(torch.stack(mb_losses).detach().mean()))
    stage_bytes = {s: rec.added.get((s, 0), 0) for s in mine}
    ops = {}
    if op_rounds:
        x, y = (t[: batch_size // m].to(dev) for t in data(0))
        ops = time_ops(rank, p, mods, mine, x, y, cfg.d_model, op_rounds)
    return {
        "rank": rank, "stages": mine, "losses": losses, "peak_bytes": max(peaks), "stage_bytes": stage_bytes,
        "microbatch_bytes": sum(stage_bytes.values()), "held_after_step": held_after,
        "events": [tuple(e) for e in rec.events], "op_times": ops,
        "orders": [[Action(s, ph, i) for st, s, ph, i, *_ in rec.events if st == k] for k in range(steps)],
    }


def train_pipelines(rank: int, world_size: int, configs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """(Runs in a rank.) Several runs in one process group: the start-up (seconds) is paid once."""
    return [train_pipeline(rank, world_size, **c) for c in configs]
