"""What a tensor-parallel step holds and sends: saved shards per layer, collectives per kind."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import torch
import torch.nn as nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import DTensor, Replicate, Shard
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from labkit.measure import ModuleHooks, SavedTensor

KINDS = {"allreduce": "all_reduce", "allgather": "all_gather", "reducescatter": "reduce_scatter",
         "broadcast": "broadcast", "alltoall": "all_to_all"}


Comm = dict[str, dict[str, int]]  # kind -> {"calls", "elements", "bytes"}


def local_shard(t: torch.Tensor) -> torch.Tensor:
    """This rank's part of a DTensor (a plain tensor as it is): what the rank holds."""
    return t.to_local() if isinstance(t, DTensor) else t


def storage_key(t: torch.Tensor) -> int:
    """One key per local storage, so views of one buffer count once."""
    return local_shard(t).untyped_storage().data_ptr()


class SavedBytes(ModuleHooks):
    """What autograd keeps, by module (labkit.measure's ``SavedTensorRecorder`` for DTensors), and SP's shards.

    Each storage counts once; a DTensor counts its local tensor; parameters, buffers and the batch
    are left out. With ``shard_modules``, a replicated DTensor saved inside one of them (the
    all-gathered input of a column-parallel linear) is kept as this rank's 1/t slice and all-gathered
    back when backward unpacks it: Korthikanti et al.'s stored shard, paid for with one all-gather.
    """

    def __init__(self, model: nn.Module, exclude: tuple[torch.Tensor, ...], mesh: DeviceMesh,
                 shard_modules: tuple[str, ...] = ()) -> None:
        super().__init__(model)
        self.skip = {storage_key(t) for t in (*model.parameters(), *model.buffers(), *exclude)}
        self.mesh, self.shard_modules = mesh, shard_modules
        self.records: dict[int, SavedTensor] = {}

    def _record(self, t: torch.Tensor) -> None:
        key = storage_key(t)
        if key not in self.skip and key not in self.records and t.numel():
            self.records[key] = SavedTensor(self.stack[-1] if self.stack else "", tuple(t.shape),
                                            str(t.dtype).replace("torch.", ""), t.untyped_storage().nbytes())

    def _pack(self, t: torch.Tensor) -> Any:
        with torch.no_grad():
            local, module = local_shard(t), (self.stack[-1] if self.stack else "")
            if (self.shard_modules and module.endswith(self.shard_modules) and isinstance(t, DTensor)
                    and all(p.is_replicate() for p in t.placements) and storage_key(local) not in self.skip
                    and local.is_contiguous()):
                piece = local.chunk(self.mesh.size())[self.mesh.get_local_rank()].clone()
                self._record(piece)
                return piece, t.shape
            self._record(local)
            return t

    def _unpack(self, packed: Any) -> torch.Tensor:
        if isinstance(packed, tuple):
            piece, shape = packed
            full = DTensor.from_local(piece, self.mesh, [Shard(0)], run_check=False).full_tensor()
            return DTensor.from_local(full.view(shape), self.mesh, [Replicate()], run_check=False)
        return packed

    def by_layer(self, n_layer: int) -> list[dict[str, int]]:
        """Saved bytes of each layer, by the module (role) that saved them."""
        out: list[dict[str, int]] = [defaultdict(int) for _ in range(n_layer)]
        for t in self.records.values():
            if t.layer is not None:
                out[t.layer][t.role] += t.nbytes
        return [dict(d) for d in out]


def kind_of(name: str) -> str:
    """all_gather_into_tensor -> all_gather, allreduce_ -> all_reduce, ..."""
    flat = name.replace("_", "")
    return next((kind for prefix, kind in KINDS.items() if flat.startswith(prefix)), name)


class CollectiveCounter(TorchDispatchMode):
    """Counts the collectives DTensor issues: calls, elements (the whole tensor covered) and bytes by kind.

    Like ``CommDebugMode`` it lets DTensor run first (``NotImplemented``) and sees the functional
    collectives it lowers to; it also counts their sizes, which CommDebugMode does not.
    """

    def __init__(self) -> None:
        super().__init__()
        self.counts: Comm = defaultdict(lambda: {"calls": 0, "elements": 0, "bytes": 0})

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if any(issubclass(t, DTensor) for t in types):
            return NotImplemented
        out = func(*args, **(kwargs or {}))
        space, name = func._schema.name.split("::")
        if space in ("c10d", "_c10d_functional") and kind_of(name) in KINDS.values():
            groups = [[t for t in tree_leaves(a) if isinstance(t, torch.Tensor)] for a in (*args, out)]
            biggest = max(groups, key=lambda ts: sum(t.numel() for t in ts))  # gather output, scatter input
            row = self.counts[kind_of(name)]
            row["calls"] += 1
            row["elements"] += sum(t.numel() for t in biggest)
            row["bytes"] += sum(t.numel() * t.element_size() for t in biggest)
        return out

    def table(self) -> Comm:
        return {k: dict(v) for k, v in sorted(self.counts.items())}


def gathered(t: torch.Tensor) -> torch.Tensor:
    """The whole tensor on this rank (a DTensor all-gathered), detached: for comparing with one process."""
    return (t.full_tensor() if isinstance(t, DTensor) else t).detach().clone()
