"""The same worker functions under ``torchrun``: one rank of a real job, gloo on the CPU and NCCL on CUDA.

Kept apart from the local launcher (``labkit.dist``), which re-exports :func:`main_under_torchrun`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist


def main_under_torchrun(fn: Callable[..., Any], **kwargs: Any) -> Any:
    """Run ``fn`` on this rank of a torchrun job; rank 0 prints the result as JSON.

    torchrun sets RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT. Where CUDA exists the
    group carries CPU tensors over gloo and CUDA tensors over NCCL, so the lab's
    CPU-resident examples run unchanged on a GPU cluster, and a worker that moves its
    model to ``cuda`` gets NCCL.
    """
    backend = "cpu:gloo,cuda:nccl" if torch.cuda.is_available() else "gloo"  # each tensor on its own device's backend
    dist.init_process_group(backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    try:
        result = fn(rank, world, **kwargs)
        if rank == 0:
            print(json.dumps(result, default=str), flush=True)
        dist.barrier()  # no rank tears gloo down while a peer still talks to it (SIGABRT, ~1 run in 25)
    finally:
        dist.destroy_process_group()
    return result
