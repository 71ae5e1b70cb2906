"""Reference solution of 06.build.sharded_ckpt: every rank writes its shard; rank 0 commits a manifest last.

The order is the whole point (the same as torch.distributed.checkpoint's: shards first, metadata last):
each rank writes its shard to a temporary name, fsyncs it and renames it; a collective makes sure every
shard is durable before rank 0 writes the manifest (with every shard's SHA-256), fsyncs it and renames it
over the old one (atomic on POSIX). A kill at any moment leaves the old manifest or the new one, and
either names only whole shards.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import torch
import torch.distributed as dist


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _durable(tmp: Path, final: Path) -> None:
    os.replace(tmp, final)
    fd = os.open(final.parent, os.O_RDONLY)  # the rename itself reaches the disk with its directory
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def save_sharded(state: dict[str, torch.Tensor], folder: str | Path, step: int) -> None:
    rank, world = dist.get_rank(), dist.get_world_size()
    folder = Path(folder)
    where = folder / f"step-{step:06d}"
    where.mkdir(parents=True, exist_ok=True)
    shard, tmp = where / f"shard-{rank}.pt", where / f"shard-{rank}.tmp"
    with open(tmp, "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())
    _durable(tmp, shard)
    shards: list = [None] * world
    dist.all_gather_object(shards, [shard.name, _sha256(shard)])  # every shard durable before the manifest
    if rank == 0:
        tmp = folder / "manifest.json.tmp"
        with open(tmp, "w") as f:
            json.dump({"step": step, "world": world, "dir": where.name, "shards": shards}, f)
            f.flush()
            os.fsync(f.fileno())
        _durable(tmp, folder / "manifest.json")
    dist.barrier()  # no rank returns before the checkpoint is visible


def load_sharded(folder: str | Path, rank: int) -> tuple[int, dict[str, torch.Tensor]] | None:
    path = Path(folder) / "manifest.json"
    if not path.exists():
        return None
    manifest = json.loads(path.read_text())
    name, digest = manifest["shards"][rank]
    shard = Path(folder) / manifest["dir"] / name
    if _sha256(shard) != digest:
        raise ValueError(f"{shard} does not match its checksum in the manifest")
    return manifest["step"], torch.load(shard, weights_only=True)
