"""(Runs in a rank.) Training steps of one ZeRO-DP engine, with its collectives and held bytes recorded."""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
import torch.distributed as dist

from labkit.inter_layer.zero.comm import CollectiveCounter, Comm, profiled_collectives
from labkit.inter_layer.zero.engines import build_engine, check, held_bytes, model_config
from labkit.rig.data import batches
from labkit.rig.model import TinyGPT, count_parameters
from labkit.rig.step import Loop, training_step


@dataclass
class RankResult:
    """What one rank measured: global-batch losses, bytes held after the last step, collectives per step."""

    strategy: str
    rank: int
    world_size: int
    model: dict[str, Any]  # the GPTConfig fields
    params: int
    losses: list[float]
    held: dict[str, int]
    comm: list[Comm]  # one table per step
    profiled: Comm = field(default_factory=dict)  # the last step, from gloo's profiler events

    @property
    def steady(self) -> Comm:
        """The last step's collectives (at step 1, DDP also broadcasts its rebuilt bucket layout)."""
        return self.comm[-1]


def train_rank(rank: int, world_size: int, strategy: str = "zero3", steps: int = 5, model: dict | None = None,
               batch_size: int = 8, seed: int = 0, crosscheck: bool = False) -> dict:
    """(Runs in a rank.) Train ``steps`` steps with ``strategy``; rank ``r`` takes slice ``r`` of batch ``i``."""
    check(strategy, world_size, batch_size, steps)
    cfg = model_config(model)
    torch.manual_seed(seed)
    net = TinyGPT(cfg)
    psi = count_parameters(net)
    module, optimizer, extra = build_engine(strategy, net, rank, world_size)
    data, local = batches(batch_size, cfg.seq_len, seed), batch_size // world_size
    loop = Loop(module, optimizer, lambda i: tuple(t[rank * local : (rank + 1) * local] for t in data(i)))
    losses, comm, profiled = [], [], {}
    for i in range(steps):
        prof = torch.profiler.profile(record_shapes=True) if crosscheck and i == steps - 1 else None
        with CollectiveCounter() as counter, prof or nullcontext():
            loss = training_step(loop, i, keep_grads=True)  # the last gradients stay: held_bytes counts them
        comm.append({k: dict(v) for k, v in sorted(counter.counts.items())})
        profiled = profiled_collectives(prof, world_size) if prof else profiled
        losses.append(torch.tensor(loss))
    mean = torch.stack(losses)
    dist.all_reduce(mean)  # after the counted steps: only to report the global-batch loss
    held = held_bytes(net, optimizer, extra)
    return asdict(RankResult(strategy, rank, world_size, asdict(cfg), psi, (mean / world_size).tolist(), held, comm,
                             profiled))


def train_jobs(rank: int, world_size: int, jobs: tuple[dict, ...]) -> list[dict]:
    """(Runs in a rank.) ``train_rank(**job)`` for each job in one process group: one start-up, not one per job."""
    return [train_rank(rank, world_size, **job) for job in jobs]
