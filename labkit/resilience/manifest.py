"""Atomic commit of a checkpoint directory, its manifest of checksums, and a reader that runs no code.

A checkpoint that a crash can leave half-written is worse than none: it looks like
the newest one. The commit protocol is the classic one for crash-consistent files
(write to a temporary name, ``fsync``, ``rename``, ``fsync`` the directory; see Pillai
et al., "All File Systems Are Not Created Equal", OSDI 2014):

1. the checkpoint is written into ``step_N.tmp/``;
2. ``manifest.json`` records the step and, for every file, its size and sha256;
3. every file and the directory are ``fsync``-ed, then ``step_N.tmp/`` is renamed to
   ``step_N/`` and the parent directory is ``fsync``-ed.

A directory without ``.tmp`` therefore always holds a complete write; the checksums
catch what happens to it later (a flipped bit, a truncated or deleted file).

DCP keeps its index (``.metadata``) as a pickle and reads it with ``pickle.load``, which
can run code. :class:`SafeReader` reads it with an unpickler that only builds the
handful of DCP metadata classes, so a tampered checkpoint cannot execute anything;
DCP itself reads tensors with ``torch.load(weights_only=True)``.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import shutil
from pathlib import Path
from typing import Any

import torch
from torch.distributed.checkpoint import FileSystemReader
from torch.distributed.checkpoint.metadata import Metadata, StorageMeta

MANIFEST = "manifest.json"
TMP_SUFFIX = ".tmp"
_ALLOWED = {
    ("torch", "Size"), ("torch.serialization", "_get_layout"), ("collections", "OrderedDict"),
    ("pathlib", "PosixPath"), ("pathlib", "PurePosixPath"), ("pathlib", "WindowsPath"),
    ("torch.distributed.checkpoint.filesystem", "_StorageInfo"),
}  # fmt: skip
_DCP_METADATA = "torch.distributed.checkpoint.metadata"


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def commit(tmp: Path, step: int) -> dict[str, Any]:
    """Write the manifest into ``tmp`` and make every file in it durable; returns the manifest."""
    files = sorted(p for p in tmp.iterdir() if p.is_file() and p.name != MANIFEST)
    manifest = {"step": step, "files": {p.name: {"bytes": p.stat().st_size, "sha256": sha256_file(p)} for p in files}}
    (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True))
    for p in [*files, tmp / MANIFEST, tmp]:
        _fsync(p)
    return manifest


def publish(tmp: Path, final: Path) -> None:
    """The atomic step: rename ``tmp`` to ``final`` and make the rename durable."""
    if final.exists():  # a stale, invalid checkpoint of the same step from before a crash
        trash = final.with_name(final.name + ".old" + TMP_SUFFIX)
        shutil.rmtree(trash, ignore_errors=True)
        os.rename(final, trash)
        shutil.rmtree(trash)
    os.rename(tmp, final)
    _fsync(final.parent)


def verify(path: Path) -> tuple[str | None, dict[str, Any]]:
    """(why ``path`` is not a sound checkpoint, or None; its manifest)."""
    try:
        manifest = json.loads((path / MANIFEST).read_text())
        files = manifest["files"]
        int(manifest["step"])
    except FileNotFoundError:
        return "no manifest.json: the write never committed", {}
    except (ValueError, KeyError, TypeError) as err:
        return f"manifest.json is unreadable ({type(err).__name__})", {}
    for name, entry in sorted(files.items()):
        f = path / name
        if not f.is_file():
            return f"missing file {name} listed in the manifest", manifest
        size = f.stat().st_size
        if size != entry["bytes"]:
            kind = "truncated" if size < entry["bytes"] else "grown"
            return f"{kind}: {name} has {size} bytes, the manifest says {entry['bytes']}", manifest
        if sha256_file(f) != entry["sha256"]:
            return f"checksum mismatch in {name} (sha256 differs from the manifest)", manifest
    if ".metadata" not in files:
        return "the manifest lists no DCP .metadata file", manifest
    return None, manifest


class _MetadataUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if module == "torch" and isinstance(getattr(torch, name, None), torch.dtype):
            return getattr(torch, name)
        if module == _DCP_METADATA or (module, name) in _ALLOWED:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"checkpoint metadata refers to {module}.{name}, which is not allowed")


class SafeReader(FileSystemReader):
    """DCP's file reader with its metadata read by an allow-list unpickler (no code runs)."""

    def read_metadata(self, *args: Any, **kwargs: Any) -> Metadata:
        rank = kwargs.get("rank")
        with open(self._get_metadata_path(rank), "rb") as f:
            metadata = _MetadataUnpickler(f).load()
        if not isinstance(metadata, Metadata):
            raise pickle.UnpicklingError(f"checkpoint metadata is a {type(metadata).__name__}, not DCP Metadata")
        if getattr(metadata, "storage_meta", None) is None:
            metadata.storage_meta = StorageMeta()
        metadata.storage_meta.load_id = self.load_id
        return metadata
