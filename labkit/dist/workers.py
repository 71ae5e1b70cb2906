"""Workers for :mod:`labkit.dist` that show a group working and failing: a smoke test and a faulty rank.

Kept apart from the launcher so it stays small; ``labkit.dist`` re-exports both names.
"""

from __future__ import annotations

import os
import time
from typing import Any

import torch
import torch.distributed as dist


def all_reduce_demo(rank: int, world_size: int, numel: int = 1024) -> dict[str, Any]:
    """Each rank contributes ``rank + 1``; all-reduce sums them. A smoke test for a group."""
    t = torch.full((numel,), float(rank + 1))
    dist.all_reduce(t)
    return {"rank": rank, "sum": float(t[0]), "expected": world_size * (world_size + 1) / 2, "pid": os.getpid()}


def faulty_worker(rank: int, world_size: int, bad_rank: int = 1, mode: str = "raise") -> int:
    """A worker that fails on purpose on ``bad_rank``: it raises, hangs, dies (exit 3) or exits 0 unreported (quiet)."""
    if rank == bad_rank:
        if mode == "raise":
            raise ValueError(f"rank {rank} was told to fail")
        if mode == "hang":
            time.sleep(3600)
        if mode == "die":
            os._exit(3)
        if mode == "quiet":  # exits with success, reporting nothing
            os._exit(0)
    dist.barrier()
    return rank
