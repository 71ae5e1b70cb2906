"""Reference solution of the build-it exercise 02.build.zero1: ZeRO stage 1 (Rajbhandari et al., SC 2020).

Instructors only (left out of the student release). The tests run it: it must pass every case.
"""

from __future__ import annotations

import torch
import torch.distributed as dist


def shard_bounds(numel: int, rank: int, world_size: int) -> tuple[int, int, int]:
    """(start, end, padded): rank's slice of ``numel`` elements padded to a multiple of ``world_size``."""
    padded = -(-numel // world_size) * world_size
    size = padded // world_size
    return rank * size, (rank + 1) * size, padded


class Zero1AdamW:
    """AdamW whose states are sharded over the ranks of the default process group (ZeRO stage 1)."""

    def __init__(self, params: list[torch.nn.Parameter], lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.0) -> None:
        self.rank, self.world_size = dist.get_rank(), dist.get_world_size()
        self.params = list(params)
        self.numel = sum(p.numel() for p in self.params)
        start, end, self.padded = shard_bounds(self.numel, self.rank, self.world_size)
        flat = self._flat([p.detach() for p in self.params])
        self.shard = torch.nn.Parameter(flat[start:end].clone())
        self.optimizer = torch.optim.AdamW([self.shard], lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                                           foreach=False)

    def _flat(self, tensors: list[torch.Tensor]) -> torch.Tensor:
        flat = torch.zeros(self.padded)
        flat[: self.numel] = torch.cat([t.reshape(-1) for t in tensors])
        return flat

    def step(self) -> None:
        grads = self._flat([p.grad if p.grad is not None else torch.zeros_like(p) for p in self.params])
        mine = torch.empty(self.padded // self.world_size)
        dist.reduce_scatter_single(mine, grads, op=dist.ReduceOp.SUM)
        self.shard.grad = mine / self.world_size
        self.optimizer.step()
        full = torch.empty(self.padded)
        dist.all_gather_single(full, self.shard.detach())
        offset = 0
        with torch.no_grad():
            for p in self.params:
                p.copy_(full[offset: offset + p.numel()].view_as(p))
                offset += p.numel()
