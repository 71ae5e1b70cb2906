"""The four ZeRO-DP engines of a rank (DDP, ZeroRedundancyOptimizer, a flat ZeRO-2, FSDP2), the bytes each holds."""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.tensor import DTensor

from labkit.errors import require_choice, require_divides, require_positive
from labkit.measure import unique_bytes
from labkit.rig.model import GPTConfig, config_from

STRATEGIES = {"ddp": 0, "zero1": 1, "zero2": 2, "zero3": 3}


MODEL = {"vocab_size": 64, "seq_len": 64, "n_layer": 2, "n_head": 4, "d_model": 32, "dropout": 0.0}


LR = 3e-3


CATEGORIES = ("parameters", "gradients", "optimizer")


def model_config(model: dict | None = None) -> GPTConfig:
    """The tiny GPT used here (``MODEL`` updated by ``model``); dropout must be 0 so ranks agree."""
    return config_from(MODEL, model, no_dropout="loss curves must match across strategies")


def check(strategy: str, world_size: int, batch_size: int, steps: int) -> None:
    """Raise a LabkitError naming the field for an unknown strategy or an uneven batch split."""
    require_choice("strategy", strategy, STRATEGIES)
    for name, value in (("world_size", world_size), ("batch_size", batch_size), ("steps", steps)):
        require_positive(name, value)
    require_divides("world_size", world_size, "batch_size", batch_size)


class FlatZero2:
    """ZeRO stage 2 by hand: replicated flat parameters, sharded gradients and AdamW states."""

    def __init__(self, model: nn.Module, rank: int, world_size: int) -> None:
        self.params, self.world = list(model.parameters()), world_size
        self.n = -(-sum(p.numel() for p in self.params) // world_size)  # the flat buffer is padded to n * Nd
        self.flat, offset = torch.zeros(self.n * world_size), 0
        for p in self.params:  # the model's parameters become views of the flat buffer
            self.flat[offset : offset + p.numel()] = p.detach().reshape(-1)
            p.data = self.flat[offset : offset + p.numel()].view_as(p)
            offset += p.numel()
        self.shard = nn.Parameter(self.flat[rank * self.n : (rank + 1) * self.n])  # a view: no copy
        self.optimizer = torch.optim.AdamW([self.shard], lr=LR, weight_decay=0.0, foreach=False)

    def step(self) -> None:
        grads = [p.grad.reshape(-1) for p in self.params]
        flat_grad = torch.cat([*grads, torch.zeros(self.n * self.world - sum(g.numel() for g in grads))])
        for p in self.params:
            p.grad = None
        shard_grad = torch.empty(self.n)
        dist.reduce_scatter_single(shard_grad, flat_grad)  # SUM: gloo has no AVG
        self.shard.grad = shard_grad.div_(self.world)
        self.optimizer.step()
        dist.all_gather_single(self.flat, self.shard.detach().clone())

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.shard.grad = None


def build_engine(strategy: str, net: nn.Module, rank: int, world_size: int) -> tuple[nn.Module, Any, list]:
    """(module to call, optimizer with step and zero_grad, tensors the optimizer adds to the model's)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.optim import ZeroRedundancyOptimizer
    from torch.nn.parallel import DistributedDataParallel as DDP

    adamw = {"lr": LR, "weight_decay": 0.0, "foreach": False}
    if strategy in ("ddp", "zero1"):  # the causal mask is a constant buffer: no broadcast every forward
        ddp = DDP(net, forward_sync_buffers=False, gradient_as_bucket_view=True)
        if strategy == "zero1":
            return ddp, ZeroRedundancyOptimizer(net.parameters(), optimizer_class=torch.optim.AdamW, **adamw), []
        return ddp, torch.optim.AdamW(net.parameters(), **adamw), []
    if strategy == "zero2":
        flat = FlatZero2(net, rank, world_size)
        return net, flat, [flat.shard]
    mesh = init_device_mesh("cpu", (world_size,))
    for block in net.h:
        fully_shard(block, mesh=mesh, reshard_after_forward=True)
    fully_shard(net, mesh=mesh, reshard_after_forward=True)
    return net, torch.optim.AdamW(net.parameters(), **adamw), []


def held_bytes(net: nn.Module, optimizer: Any, extra: list) -> dict[str, int]:
    """Bytes this rank keeps between steps, by distinct storage; a DTensor counts its local shard."""
    local = lambda t: t.to_local() if isinstance(t, DTensor) else t  # noqa: E731
    params = [*net.parameters(), *extra]
    inner = getattr(optimizer, "optim", getattr(optimizer, "optimizer", optimizer))
    states = [local(t) for s in inner.state.values() for t in s.values() if torch.is_tensor(t) and t.dim()]
    return {"parameters": unique_bytes(local(p) for p in params),
            "gradients": unique_bytes(local(p.grad) for p in params), "optimizer": unique_bytes(states)}
