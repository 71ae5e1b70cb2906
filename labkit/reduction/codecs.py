"""Lossless codecs and the bound each measurement stands beside: zstd, lz4, order-0 entropy.

Lossless compressors find two kinds of redundancy: repeated strings (the LZ77 stage of zstd
and lz4) and skewed symbol statistics (zstd's Huffman and FSE coders). The order-0 Shannon
entropy H of a byte stream, in bits per byte (Shannon 1948), bounds what a coder of independent
bytes can reach: a ratio of 8 / H. zstd beats it when bytes depend on each other: its LZ77 stage
replaces a repeated string by a short reference (text; exact zero floats, as in post-ReLU and
causally masked attention); and its fresh Huffman table per block (at most 128 KiB) follows a
stream whose statistics change along the way (tensors of different scales, concatenated).

Speed is MB/s (MB = 1e6 bytes) per CPU second of the compressing thread (``time.thread_time``: each
codec here compresses on the calling thread), shown but never checked: the fastest of up to ``SPEED_RUNS``
compressions (within ``SPEED_BUDGET_S``) after an untimed warm-up call. A single wall-clock call showed a
cold start (issue 40: the first row of notebook 05's table at 56 MB/s, every other at 500-800: the codec's
first call builds its context and touches fresh memory), and on a shared machine a wall clock also counts
the time other processes held the core (rows of one kind then differed two- to fivefold from run to run).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import lz4.frame
import numpy as np
import zstandard

from labkit.errors import LabkitError, require_choice

CODECS = ("zstd-3", "zstd-19", "lz4")
SPEED_RUNS = 3  # timed compressions per stream, the fastest kept
SPEED_BUDGET_S = 0.1  # CPU seconds: no further run once the timed ones took this long (zstd-19, a large stream)
WARM_BYTES = 1 << 16


def require_data(data: bytes) -> bytes:
    if not isinstance(data, (bytes, bytearray, memoryview)) or len(data) == 0:
        raise LabkitError(f"data must be non-empty bytes (got {type(data).__name__} {data!r:.24})")
    return bytes(data)


def compress(data: bytes, codec: str = "zstd-3") -> bytes:
    """Compress with zstd (level 3 or 19, one thread) or lz4 (the default frame)."""
    data = require_data(data)
    if require_choice("codec", codec, CODECS) == "lz4":
        return lz4.frame.compress(data)
    return zstandard.ZstdCompressor(level=int(codec[len("zstd-"):])).compress(data)


def decompress(blob: bytes, codec: str = "zstd-3") -> bytes:
    """The inverse of ``compress`` for the same codec."""
    if require_choice("codec", codec, CODECS) == "lz4":
        return lz4.frame.decompress(blob)
    return zstandard.ZstdDecompressor().decompress(blob)


def entropy_bits(data: bytes) -> float:
    """Order-0 Shannon entropy of the byte stream, in bits per byte (0 to 8)."""
    counts = np.bincount(np.frombuffer(require_data(data), dtype=np.uint8), minlength=256)
    p = counts[counts > 0] / counts.sum()
    return float(max(0.0, -(p * np.log2(p)).sum()))


def entropy_bound(data: bytes) -> float:
    """8 / H: the best ratio of a coder that codes each byte on its own (inf for a constant stream)."""
    return math.inf if (h := entropy_bits(data)) == 0.0 else 8.0 / h


@dataclass(frozen=True)
class CodecResult:
    """One codec on one byte stream: sizes, whether the bytes came back equal, and the speed."""

    codec: str
    raw_bytes: int
    compressed_bytes: int
    round_trip: bool
    mb_per_s: float  # compression, per CPU second of the thread: shown, never checked

    @property
    def ratio(self) -> float:
        return self.raw_bytes / self.compressed_bytes


def measure(data: bytes, codec: str = "zstd-3") -> CodecResult:
    """Compress (a warm-up call, then the fastest of up to ``SPEED_RUNS``), decompress, check the bytes came back."""
    data = require_data(data)
    compress(data[:WARM_BYTES], codec)  # untimed: the codec's first call builds its context
    best, spent = math.inf, 0.0
    for _ in range(SPEED_RUNS):
        t0 = time.thread_time()
        blob = compress(data, codec)
        took = time.thread_time() - t0
        best, spent = min(best, took), spent + took
        if spent > SPEED_BUDGET_S:
            break
    speed = len(data) / 1e6 / max(best, 1e-9)
    return CodecResult(codec, len(data), len(blob), decompress(blob, codec) == data, speed)
