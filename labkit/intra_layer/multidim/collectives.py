"""The collectives the hand-written layers run (none in a group of one rank), and a log of every ``c10d`` op."""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

_KINDS = {"allreduce_": "all_reduce", "broadcast_": "broadcast", "reduce_": "reduce",
          "_allgather_base_": "all_gather", "_reduce_scatter_base_": "reduce_scatter"}


class CollectiveLog(TorchDispatchMode):
    """Every c10d collective dispatched while active, as ``(kind, group size, bytes of its largest tensor)``."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, int, int]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        space, name = func._schema.name.split("::")
        if space == "c10d" and name not in ("barrier", "monitored_barrier_"):
            leaves = tree_leaves((args, kwargs or {}))
            groups = [a for a in leaves if isinstance(a, torch.ScriptObject)]  # the boxed ProcessGroup
            size = torch._C._distributed_c10d.ProcessGroup.unbox(groups[0]).size() if groups else 0
            nbytes = max((t.numel() * t.element_size() for t in leaves if isinstance(t, torch.Tensor)), default=0)
            self.calls.append((_KINDS.get(name, name), size, nbytes))
        return out


def group_broadcast(t: torch.Tensor, src: int, group) -> torch.Tensor:
    """``t`` from group rank ``src`` to every rank of ``group`` (in place)."""
    if group is not None:
        dist.broadcast(t, group=group, group_src=src)
    return t


def group_reduce(t: torch.Tensor, dst: int, group) -> torch.Tensor:
    """The sum over ``group``, on group rank ``dst`` (in place)."""
    if group is not None:
        dist.reduce(t, group=group, group_dst=dst)
    return t


def group_all_reduce(t: torch.Tensor, group) -> torch.Tensor:
    """The sum over ``group`` on every rank of it (in place)."""
    if group is not None:
        dist.all_reduce(t, group=group)
    return t


def group_all_gather(piece: torch.Tensor, group) -> torch.Tensor:
    """Pieces of all ranks of ``group``, stacked along dim 0 in group-rank order."""
    if group is None:
        return piece
    out = piece.new_empty((group.size() * piece.shape[0], *piece.shape[1:]))
    dist.all_gather_single(out, piece.contiguous(), group=group)
    return out


def group_reduce_scatter(full: torch.Tensor, group) -> torch.Tensor:
    """Sum over ``group``, then this rank's 1/g of dim 0."""
    if group is None:
        return full
    out = full.new_empty((full.shape[0] // group.size(), *full.shape[1:]))
    dist.reduce_scatter_single(out, full.contiguous(), group=group)
    return out
