"""What a graded rank records, for the build-it exercises that run the learner's module in their own processes.

The learner's module runs only inside ranks started by :func:`labkit.dist.run` with ``untrusted=True``; what comes
back is plain data (tensors, numbers, strings, lists, dicts), never a verdict. This module holds the rank side that
tp_layers, sp_block, act_offload, selective_recompute and sharded_ckpt share:

* :class:`CollectiveLog`, a dispatch mode that logs every c10d collective the rank runs, in order, with its kind and
  its elements (torch's ``CommDebugMode`` counts calls but not sizes);
* :func:`attempt`, one part of the checks, the learner's faults turned into plain-data entries;
* :func:`all_agree`, a gate before a collective phase, so that a rank whose local phase raised does not leave
  its peers alone in a collective;
* :func:`sync`, the boundary between two parts: a one-element all-reduce, so that a collective only some ranks
  call stops the group at once with gloo's own mismatch message instead of hanging to the timeout.

The launch itself, stderr capture and the op log are :mod:`labkit.practice.build.records`'.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

KINDS = {"allreduce": "all_reduce", "allgather": "all_gather", "reducescatter": "reduce_scatter",
         "broadcast": "broadcast", "alltoall": "all_to_all", "barrier": "barrier", "send": "send", "recv": "recv"}


def kind_of(name: str) -> str | None:
    """all_gather_into_tensor -> all_gather, allreduce_ -> all_reduce, _reduce_scatter_base_ -> reduce_scatter."""
    flat = name.replace("_", "")
    return next((kind for prefix, kind in KINDS.items() if flat.startswith(prefix)), None)


class CollectiveLog(TorchDispatchMode):
    """Every c10d collective this rank runs inside the ``with``, in order: ``[kind, elements]`` pairs.

    ``elements`` is the larger side of the op (a gather's output, a scatter's input), as Megatron counts traffic.
    """

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[list] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204 - torch's signature
        if any(issubclass(t, DTensor) for t in types):
            return NotImplemented  # DTensor lowers it first; its collectives come back through here
        out = func(*args, **(kwargs or {}))
        space, name = func._schema.name.split("::")
        kind = kind_of(name) if space in ("c10d", "_c10d_functional") else None
        if kind is not None and not name.startswith("wait"):
            groups = [[t for t in tree_leaves(a) if isinstance(t, torch.Tensor)] for a in (*args, out)]
            biggest = max(groups, key=lambda ts: sum(t.numel() for t in ts))
            self.ops.append([kind, int(sum(t.numel() for t in biggest))])
        return out


def frames_in(tb: str, path: str | Path) -> str:
    """The traceback lines inside the learner's file: where in THEIR code it raised."""
    name, lines = Path(path).name, tb.splitlines()
    picked = [f"{ln.strip()} -> {lines[i + 1].strip()}" for i, ln in enumerate(lines[:-1])
              if name in ln and "File" in ln]  # fmt: skip
    return "; ".join(picked[-2:])


def fault(err: BaseException, path: str | Path) -> dict[str, Any]:
    """A learner's exception as plain data, shaped as the harness's failure entries: ``{"failure": {"kind":
    "not_written" | "raised", "message", "learner_frames"}}`` (a stub's NotImplementedError is "not_written")."""
    kind = "not_written" if isinstance(err, NotImplementedError) else "raised"
    return {"failure": {"kind": kind, "message": f"{type(err).__name__}: {err}"[:600],
                        "learner_frames": frames_in(traceback.format_exc(), path)}}


def attempt(path: str | Path, fn: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """Run one part of the checks: its record, or the learner's fault as an entry (never raised)."""
    try:
        return fn()
    except Exception as err:  # noqa: BLE001 - the learner's code may raise anything; it is recorded, not judged here
        return fault(err, path)


def sync() -> None:
    """(In a rank.) The boundary between two parts of the checks: a one-element all-reduce, not a barrier, so that
    a rank still inside a larger collective of the learner's (one that only some ranks call) makes gloo stop the
    group at once with its own "Is there a distributed collective mismatch in your code?", not hang."""
    dist.all_reduce(torch.zeros(1))


def all_agree(ok: bool) -> bool:
    """(In a rank.) Whether every rank's local phase succeeded: no rank enters a collective phase alone."""
    flag = torch.tensor([0 if ok else 1])
    dist.all_reduce(flag)
    return int(flag) == 0
