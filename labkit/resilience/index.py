"""DCP's checkpoint index as JSON: what labkit loads by instead of DCP's pickled ``.metadata``.

``torch.distributed.checkpoint`` keeps its index (which tensor, which shape and dtype, which
bytes of which file) as a pickle, and ``pickle.load`` can name any callable: an allow-list
unpickler is only as safe as every module it lets through (``find_class`` resolves dotted names
through a module's own imports, e.g. ``torch.serialization.os.system``). So labkit never opens
``.metadata``: at save time the writer hands over the :class:`Metadata` it built, :func:`to_json`
writes it as plain data into ``manifest.json``, and :func:`from_json` rebuilds DCP's classes from
that data, checking every field (types, dtypes from a fixed list, files named in the manifest,
byte ranges inside those files, no tensor larger than the files that hold it, chunks that tile each tensor
exactly, a bounded number of them; the manifest itself is bounded in bytes before it is read). A tampered index
can at worst be refused; it cannot run code or allocate more than the checkpoint's own bytes.
"""

from __future__ import annotations

import io
import math
from pathlib import Path
from typing import Any

import torch
from torch.distributed.checkpoint import FileSystemReader, FileSystemWriter
from torch.distributed.checkpoint.filesystem import _StorageInfo
from torch.distributed.checkpoint.metadata import (
    ChunkStorageMetadata,
    Metadata,
    MetadataIndex,
    StorageMeta,
    TensorProperties,
    TensorStorageMetadata,
)

from labkit.errors import LabkitError
from labkit.resilience.state import DTYPES

MAX_DIMS = 8
MAX_CHUNKS = 1 << 14  # chunks (and storage rows) in one index: labkit's state has ~100 tensors, 8 ranks at most
MAX_TENSOR_CHUNKS = 1024  # chunks of one tensor (a shard per rank); their pairwise overlap test is n^2


def to_json(metadata: Metadata) -> dict[str, Any]:
    """The tensors and byte ranges of a DCP index as plain data (only tensor entries exist in labkit's state)."""
    tensors = {}
    for key, meta in metadata.state_dict_metadata.items():
        if not isinstance(meta, TensorStorageMetadata):
            raise LabkitError(f"state entry {key} must be a tensor (got {type(meta).__name__})")
        tensors[key] = {"dtype": str(meta.properties.dtype).removeprefix("torch."), "size": list(meta.size),
                        "chunks": [[list(c.offsets), list(c.sizes)] for c in meta.chunks]}  # fmt: skip
    storage = [[i.fqn, None if i.offset is None else list(i.offset), i.index, s.relative_path, s.offset, s.length]
               for i, s in metadata.storage_data.items()]  # fmt: skip
    return {"tensors": tensors, "storage": storage}


def _ints(value: Any, what: str, n: int | None = None) -> list[int]:
    ok = isinstance(value, list) and len(value) <= MAX_DIMS and (n is None or len(value) == n)
    if not ok or not all(type(v) is int and 0 <= v < 1 << 62 for v in value):
        dims = f"{n} " if n is not None else f"at most {MAX_DIMS} "
        raise LabkitError(f"index: {what} must be a list of {dims}non-negative integers below 2^62 (got {value!r:.80})")
    return value


def _tensor(key: Any, entry: Any, budget: int) -> TensorStorageMetadata:
    if not isinstance(key, str) or not isinstance(entry, dict) or set(entry) != {"dtype", "size", "chunks"}:
        raise LabkitError(f"index: tensor entry {key!r:.60} must have exactly dtype, size and chunks")
    if entry["dtype"] not in DTYPES:
        raise LabkitError(f"index: dtype of {key} must be one of {', '.join(DTYPES)} (got {entry['dtype']!r:.40})")
    dtype = DTYPES[entry["dtype"]]
    size = _ints(entry["size"], f"size of {key}")
    if math.prod(size) * dtype.itemsize > budget:
        raise LabkitError(f"index: {key} of size {size} needs more bytes than the checkpoint's files hold ({budget})")
    chunks = entry["chunks"]
    if not isinstance(chunks, list) or not chunks or not all(isinstance(c, list) and len(c) == 2 for c in chunks):
        raise LabkitError(f"index: chunks of {key} must be a non-empty list of [offsets, sizes] pairs")
    if len(chunks) > MAX_TENSOR_CHUNKS:
        raise LabkitError(f"index: {key} has {len(chunks)} chunks, more than the limit of {MAX_TENSOR_CHUNKS}")
    n = len(size)
    out = [ChunkStorageMetadata(torch.Size(_ints(o, f"chunk offsets of {key}", n)),
                                torch.Size(_ints(s, f"chunk sizes of {key}", n))) for o, s in chunks]  # fmt: skip
    _check_tiling(key, size, out)
    return TensorStorageMetadata(TensorProperties(dtype=dtype), torch.Size(size), out)


def _check_tiling(key: str, size: list[int], chunks: list[ChunkStorageMetadata]) -> None:
    """The chunks must tile the tensor exactly: each inside it, no two overlapping, their volumes summing to its.

    DCP fills a loaded tensor chunk by chunk into memory that is not cleared first, so a chunk that is missing
    would leave uninitialised bytes in a parameter (as a tampered index once did); an overlap would let two
    stored versions race for the same elements.
    """
    for c in chunks:
        if any(o + n > d for o, n, d in zip(c.offsets, c.sizes, size, strict=True)):
            raise LabkitError(f"index: chunk {list(c.offsets)} + {list(c.sizes)} of {key} lies outside its size "
                              f"{size}")
    if sum(math.prod(c.sizes) for c in chunks) != math.prod(size):
        raise LabkitError(f"index: the chunks of {key} hold {sum(math.prod(c.sizes) for c in chunks)} elements, "
                          f"its size {size} has {math.prod(size)}: they must tile the tensor exactly")
    if len(chunks) > 1 and size:
        lo = torch.tensor([list(c.offsets) for c in chunks])
        hi = lo + torch.tensor([list(c.sizes) for c in chunks])
        meets = ((lo[:, None] < hi[None]) & (lo[None] < hi[:, None])).all(-1)  # boxes i and j share an element
        meets &= (hi > lo).all(-1)[:, None] & (hi > lo).all(-1)[None]  # an empty chunk shares none
        meets.fill_diagonal_(False)
        if meets.any():
            i, j = (int(v) for v in meets.nonzero()[0])
            raise LabkitError(f"index: chunks {list(chunks[i].offsets)} and {list(chunks[j].offsets)} of {key} "
                              "overlap: they must tile the tensor exactly")


def _storage(row: Any, files: dict[str, int]) -> tuple[MetadataIndex, _StorageInfo]:
    if not isinstance(row, list) or len(row) != 6:
        raise LabkitError("index: a storage row must be [key, offsets, index, file, byte offset, length]")
    key, offset, index, name, start, length = row
    if not isinstance(key, str) or not (index is None or type(index) is int):
        raise LabkitError(f"index: storage row for {key!r:.60} has a key that is not text or an index not an int")
    if name not in files:
        raise LabkitError(f"index: {key} is read from {name!r:.60}, which the manifest does not list")
    start, length = _ints([start, length], f"byte range of {key}")
    if start + length > files[name]:
        raise LabkitError(f"index: {key} reads bytes {start}..{start + length} of {name}, which has {files[name]}")
    offsets = None if offset is None else torch.Size(_ints(offset, f"storage offsets of {key}"))
    return MetadataIndex(key, offsets, index), _StorageInfo(name, start, length)


def from_json(data: Any, files: dict[str, int]) -> Metadata:
    """DCP's index rebuilt from :func:`to_json`'s data; ``files`` maps each file the manifest lists to its bytes.

    Raises :class:`LabkitError` naming the first field that is malformed, a file outside the
    manifest, a byte range past a file's end, chunks that do not tile their tensor exactly, more chunks
    than :data:`MAX_CHUNKS`, or a tensor chunk that no storage row holds.
    """
    if not isinstance(data, dict) or not isinstance(data.get("tensors"), dict) or not isinstance(
            data.get("storage"), list):  # fmt: skip
        raise LabkitError("index: must be an object with a 'tensors' object and a 'storage' list")
    budget = sum(files.values())
    counted = sum(len(e["chunks"]) for e in data["tensors"].values() if isinstance(e, dict)
                  and isinstance(e.get("chunks"), list))  # fmt: skip
    if max(counted, len(data["storage"])) > MAX_CHUNKS:
        raise LabkitError(f"index: {max(counted, len(data['storage']))} chunks or storage rows, more than the "
                          f"limit of {MAX_CHUNKS}")
    tensors = {key: _tensor(key, entry, budget) for key, entry in data["tensors"].items()}
    storage = dict(_storage(row, files) for row in data["storage"])
    for key, meta in tensors.items():
        for chunk in meta.chunks:
            if MetadataIndex(key, chunk.offsets) not in storage:
                raise LabkitError(f"index: chunk {list(chunk.offsets)} of {key} has no storage row")
    return Metadata(tensors, planner_data={k: (k,) for k in tensors}, storage_data=storage,
                    storage_meta=StorageMeta())  # fmt: skip


def read_tensor(path: Path, metadata: Metadata, key: str) -> torch.Tensor:
    """One whole (single-chunk) tensor of a checked checkpoint, read as DCP reads it: ``weights_only=True``."""
    meta = metadata.state_dict_metadata.get(key)
    if meta is None or len(meta.chunks) != 1:
        raise LabkitError(f"index: {key} must be present as one chunk")
    info = metadata.storage_data[MetadataIndex(key, meta.chunks[0].offsets)]
    with open(path / info.relative_path, "rb") as f:
        f.seek(info.offset)
        return torch.load(io.BytesIO(f.read(info.length)), map_location="cpu", weights_only=True)


class IndexingWriter(FileSystemWriter):
    """DCP's file writer that keeps the index it writes, so it can be stored as JSON (:func:`to_json`)."""

    metadata: Metadata | None = None

    def finish(self, metadata: Metadata, results: list) -> None:
        super().finish(metadata, results)
        self.metadata = metadata


class JsonIndexReader(FileSystemReader):
    """DCP's file reader given an index already checked (:func:`from_json`): it never opens ``.metadata``."""

    def __init__(self, path: Any, metadata: Metadata) -> None:
        super().__init__(path)
        self._metadata = metadata

    def read_metadata(self, *args: Any, **kwargs: Any) -> Metadata:
        self._metadata.storage_meta = StorageMeta(load_id=self.load_id)
        return self._metadata
