"""Build it yourself (notebook 06): a sharded checkpoint that survives a SIGKILL at any moment.

``save_sharded`` runs on every rank of a real gloo group (``torch.distributed`` is initialised for you; call its
functions as ``dist.barrier()``, ``dist.all_gather_object(...)``). Each rank writes its own shard with
``torch.save``; rank 0 commits a manifest that makes the checkpoint visible. ``load_sharded`` runs in one
process, no collectives: the newest committed checkpoint's step and rank ``rank``'s shard, or None.
The folder is untrusted on the way back in: load with ``torch.load(..., weights_only=True)``.
Check it with ``build.check_build("06.build.sharded_ckpt", path)``.
"""

from __future__ import annotations

import os  # noqa: F401 - you will need it
from pathlib import Path

import torch
import torch.distributed as dist  # noqa: F401 - you will need it


def save_sharded(state: dict[str, torch.Tensor], folder: str | Path, step: int) -> None:
    """Save this rank's ``state`` as part of checkpoint ``step`` in ``folder`` (call it on every rank)."""
    raise NotImplementedError


def load_sharded(folder: str | Path, rank: int) -> tuple[int, dict[str, torch.Tensor]] | None:
    """(step, rank's state) of the newest complete checkpoint in ``folder``; None when there is none."""
    raise NotImplementedError
