"""(Runs in a rank.) Tensor-parallel training steps, measured; and the one-process reference they must match."""

from __future__ import annotations

import warnings
from contextlib import ExitStack
from dataclasses import asdict, dataclass
from functools import partial
from typing import Any

import torch
import torch.nn as nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.debug import CommDebugMode
from torch.distributed.tensor.parallel import (
    loss_parallel,
)

from labkit import dist as ldist
from labkit.errors import require_positive
from labkit.intra_layer.megatron.model import LR, SAVED_SHARDS, build, check, model_config, qkv_rows
from labkit.intra_layer.megatron.observe import (
    CollectiveCounter,
    Comm,
    SavedBytes,
    gathered,
    kind_of,
    local_shard,
    storage_key,
)
from labkit.rig.data import batches
from labkit.rig.model import TinyGPT
from labkit.rig.step import Loop, StepHooks, forward_backward, optimizer_step, training_step


@dataclass
class RankResult:
    """One rank: bytes and collectives of the first step, losses of every step, outputs of the last."""

    rank: int
    tp: int
    sp: bool
    model: dict  # the GPTConfig fields
    batch_size: int
    param_bytes: int  # local shards, each storage once
    activation_bytes: list[int]  # saved for backward, per layer
    activation_roles: dict[str, int]  # layer 0, by the module that saved
    comm: Comm  # one forward+backward, counted by CollectiveCounter
    comm_debug: dict[str, int]  # calls per kind of the same, counted by torch's CommDebugMode
    comm_step: Comm  # the optimizer step
    losses: list[float]
    logits: torch.Tensor  # the last step's, gathered
    grads: dict[str, torch.Tensor]  # the last step's, gathered, c_attn rows back in the fused [q; k; v] order


def train_tp(rank: int, world_size: int, sp: bool = False, model: dict | None = None, batch_size: int = 2,
             seed: int = 0, steps: int = 1, tp: int = 0) -> dict:
    """(Runs in a rank.) ``steps`` SGD steps of the tiny GPT split over all ranks, batch ``i`` at step ``i``."""
    cfg = model_config(model)
    t = check(world_size, cfg, sp, batch_size, tp)
    require_positive("steps", steps)
    mesh = init_device_mesh("cpu", (t,))
    net = build(cfg, mesh, sp, seed)
    opt = torch.optim.SGD(net.parameters(), lr=LR)
    losses, seen = [], {}
    loop = Loop(net, opt, batches(batch_size, cfg.seq_len, seed), loss=partial(_logits_and_loss, seen))
    param_bytes = sum({storage_key(p): local_shard(p).untyped_storage().nbytes() for p in net.parameters()}.values())

    def counted(_batch) -> ExitStack:  # forward and backward: collectives counted two ways, the loss parallel
        stack = ExitStack()
        seen["debug"], seen["counter"] = stack.enter_context(CommDebugMode()), stack.enter_context(CollectiveCounter())
        stack.enter_context(loss_parallel())
        return stack

    def saving(batch) -> SavedBytes:
        seen["saved"] = SavedBytes(net, tuple(batch), mesh, SAVED_SHARDS if sp else ())
        return seen["saved"]

    def stepping() -> CollectiveCounter:
        seen["stepped"] = CollectiveCounter()
        return seen["stepped"]

    hooks = StepHooks(around=counted, forward=saving, optimizer=stepping)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Full backward hook is firing")  # CommDebugMode's module tracker
        for i in range(steps):
            opt.zero_grad(set_to_none=True)
            loss = forward_backward(loop, i, hooks)
            optimizer_step(opt, hooks, zero_grad=False)  # SGD leaves the last gradients in place
            saved, counter, debug, stepped = seen["saved"], seen["counter"], seen["debug"], seen["stepped"]
            if i == 0:
                layers = saved.by_layer(cfg.n_layer)
                kinds = {kind_of(str(k).split(".")[-1]): v for k, v in debug.get_comm_counts().items()}
                first = ([sum(d.values()) for d in layers], layers[0], counter.table(), kinds, stepped.table())
            losses.append(float(gathered(loss)))
    grads = {n: gathered(p.grad) for n, p in net.named_parameters()}  # SGD leaves the last gradients in place
    back = torch.argsort(qkv_rows(cfg.d_model, t))
    grads |= {n: g[back] for n, g in grads.items() if ".c_attn." in n}
    logits = gathered(seen["logits"])
    return asdict(RankResult(rank, t, sp, asdict(cfg), batch_size, param_bytes, *first, losses, logits, grads))


def _logits_and_loss(seen: dict, model: nn.Module, batch) -> torch.Tensor:
    """The tiny GPT's loss, its logits kept in ``seen`` (the last step's are compared across ranks)."""
    seen["logits"], loss = model(*batch)
    return loss


def train_jobs(rank: int, world_size: int, jobs: tuple[dict, ...]) -> list[dict]:
    """(Runs in a rank.) ``train_tp(**job)`` for each job in one process group: one start-up, not one per job."""
    return [train_tp(rank, world_size, **job) for job in jobs]


def run_jobs(jobs: list[dict], world_size: int = 2, timeout: float = 180.0) -> list[list[RankResult]]:
    """Run each job (keyword arguments of ``train_tp``) on ``world_size`` local ranks; per job, per rank."""
    for job in jobs:  # bad input fails here, before any process starts
        check(world_size, model_config(job.get("model")), job.get("sp", False), job.get("batch_size", 2),
              job.get("tp", 0))
    out = ldist.run(train_jobs, world_size, timeout=timeout, threads=1, jobs=tuple(jobs))
    return [[RankResult(**rank[j]) for rank in out] for j in range(len(jobs))]


def run_tp(world_size: int = 2, sp: bool = False, timeout: float = 120.0, **kwargs: Any) -> list[RankResult]:
    """Tensor (with ``sp``, and sequence) parallel training on ``world_size`` local ranks; one result per rank."""
    return run_jobs([{"sp": sp, **kwargs}], world_size, timeout)[0]


def single_process(model: dict | None = None, batch_size: int = 2, seed: int = 0, steps: int = 1) -> dict[str, Any]:
    """The reference: labkit.rig.model's own TinyGPT (fused QKV, tied head), same seed, batches and SGD."""
    cfg = model_config(model)
    torch.manual_seed(seed)
    net = TinyGPT(cfg)
    seen: dict = {}
    loop = Loop(net, torch.optim.SGD(net.parameters(), lr=LR), batches(batch_size, cfg.seq_len, seed),
                loss=partial(_logits_and_loss, seen))
    losses = [training_step(loop, i, keep_grads=True) for i in range(steps)]
    grads = {n: p.grad for n, p in net.named_parameters()}
    return {"losses": losses, "logits": seen["logits"].detach(), "grads": grads}
