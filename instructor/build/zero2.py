"""Reference solution of the build-it exercise 02.build.zero2: ZeRO stage 2 (Rajbhandari et al., SC 2020, 5.2).

Instructors only (left out of the student release). The tests run it: it must pass every case.
"""

from __future__ import annotations

import functools

import torch
import torch.distributed as dist


def shard_bounds(numel: int, rank: int, world_size: int) -> tuple[int, int, int]:
    """(start, end, padded): rank's slice of ``numel`` elements padded to a multiple of ``world_size``."""
    padded = -(-numel // world_size) * world_size
    size = padded // world_size
    return rank * size, (rank + 1) * size, padded


class Zero2AdamW:
    """AdamW whose states and gradients are sharded over the ranks of the default process group (ZeRO stage 2)."""

    def __init__(self, params: list[torch.nn.Parameter], lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.0) -> None:
        self.rank, self.world_size = dist.get_rank(), dist.get_world_size()
        self.params = list(params)
        self.numel = sum(p.numel() for p in self.params)
        self.start, self.end, self.padded = shard_bounds(self.numel, self.rank, self.world_size)
        self.size = self.padded // self.world_size
        flat = torch.zeros(self.padded)
        flat[: self.numel] = torch.cat([p.detach().reshape(-1) for p in self.params])
        self.shard = torch.nn.Parameter(flat[self.start:self.end].clone())
        self.shard.grad = torch.zeros_like(self.shard)
        self.optimizer = torch.optim.AdamW([self.shard], lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                                           foreach=False)
        offset = 0
        for p in self.params:
            p.register_post_accumulate_grad_hook(functools.partial(self._reduce, offset=offset))
            offset += p.numel()

    def _reduce(self, p: torch.nn.Parameter, offset: int) -> None:
        grad = p.grad.reshape(-1)
        for owner in range(self.world_size):
            lo, hi = max(offset, owner * self.size), min(offset + p.numel(), (owner + 1) * self.size)
            if lo >= hi:
                continue
            piece = grad[lo - offset: hi - offset].clone()
            dist.reduce(piece, dst=owner)
            if owner == self.rank:
                self.shard.grad[lo - self.start: hi - self.start] += piece
        p.grad = None

    def step(self) -> None:
        self.shard.grad /= self.world_size
        self.optimizer.step()
        full = torch.empty(self.padded)
        dist.all_gather_single(full, self.shard.detach())
        offset = 0
        with torch.no_grad():
            for p in self.params:
                p.copy_(full[offset: offset + p.numel()].view_as(p))
                offset += p.numel()
        self.shard.grad.zero_()
