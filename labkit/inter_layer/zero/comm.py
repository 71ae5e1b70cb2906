"""Collectives of a step, counted two ways: every ``c10d::`` op through a dispatch mode, and gloo's profiler events."""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from labkit.errors import require_choice

BACKENDS = ("nccl", "gloo")


Comm = dict[str, dict[str, int]]  # collective kind -> {"calls", "elements", "bytes"}


def _kind(name: str) -> str:
    """c10d::_allgather_base_ -> all_gather, gloo:all_reduce -> all_reduce, ..."""
    name = name.split(":")[-1].strip("_").replace("_", "")
    kinds = ("allreduce", "allgather", "reducescatter", "broadcast")
    found = next((k for k in kinds if name.startswith(k)), name)
    return {"allreduce": "all_reduce", "allgather": "all_gather", "reducescatter": "reduce_scatter"}.get(found, found)


class CollectiveCounter(TorchDispatchMode):
    """Counts every c10d collective dispatched while active: calls, elements and bytes by kind.

    Elements are the whole tensor a collective covers (all-reduced or broadcast tensor, all-gather
    output, reduce-scatter input). A ring moves (N-1)/N of that per rank; the paper rounds it to 1.
    """

    def __init__(self) -> None:
        super().__init__()
        self.counts: Comm = defaultdict(lambda: {"calls": 0, "elements": 0, "bytes": 0})

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        space, name = func._schema.name.split("::")
        if space in ("c10d", "_c10d_functional") and name not in ("wait_tensor", "barrier"):
            groups = [[t for t in tree_leaves(a) if isinstance(t, torch.Tensor)] for a in (*args, out)]
            biggest = max(groups, key=lambda ts: sum(t.numel() for t in ts))
            row = self.counts[_kind(name)]
            row["calls"] += 1
            row["elements"] += sum(t.numel() for t in biggest)
            row["bytes"] += sum(t.numel() * t.element_size() for t in biggest)
        return out


def profiled_collectives(prof: Any, world_size: int) -> Comm:
    """The same table from the ``gloo:*`` events of a torch.profiler run: what the backend ran."""
    out: Comm = defaultdict(lambda: {"calls": 0, "elements": 0})
    for ev in prof.events():
        if ev.name.startswith("gloo:"):
            kind, n = _kind(ev.name), sum(math.prod(s) for s in ev.input_shapes if s)
            out[kind]["calls"] += 1
            out[kind]["elements"] += n * (world_size if kind == "all_gather" else 1)  # its input is one shard
    return {k: dict(v) for k, v in sorted(out.items())}


def volume(comm: Comm, backend: str = "nccl") -> int:
    """Elements per rank as the paper counts them: an all-reduce (on gloo, a reduce-scatter too) counts twice."""
    require_choice("backend", backend, BACKENDS)
    double = {"all_reduce", "reduce_scatter"} if backend == "gloo" else {"all_reduce"}
    return sum(v["elements"] * (2 if k in double else 1) for k, v in comm.items())
