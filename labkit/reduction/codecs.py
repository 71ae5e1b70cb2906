"""Lossless codecs and the bound each measurement stands beside: zstd, lz4, order-0 entropy.

Lossless compressors find two kinds of redundancy: repeated strings (the LZ77 stage of zstd
and lz4) and skewed symbol statistics (zstd's Huffman and FSE coders). The order-0 Shannon
entropy H of a byte stream, in bits per byte (Shannon 1948), bounds what a coder of independent
bytes can reach: a ratio of 8 / H. zstd beats it when bytes depend on each other: its LZ77 stage
replaces a repeated string by a short reference (text; exact zero floats, as in post-ReLU and
causally masked attention); and its fresh Huffman table per block (at most 128 KiB) follows a
stream whose statistics change along the way (tensors of different scales, concatenated).

Speed is MB/s (MB = 1e6 bytes) from a wall clock, shown but never checked.
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
    mb_per_s: float  # compression, from a wall clock: shown, never checked

    @property
    def ratio(self) -> float:
        return self.raw_bytes / self.compressed_bytes


def measure(data: bytes, codec: str = "zstd-3") -> CodecResult:
    """Compress, time it, decompress, and check the bytes came back equal."""
    data = require_data(data)
    t0 = time.perf_counter()
    blob = compress(data, codec)
    speed = len(data) / 1e6 / max(time.perf_counter() - t0, 1e-9)
    return CodecResult(codec, len(data), len(blob), decompress(blob, codec) == data, speed)
