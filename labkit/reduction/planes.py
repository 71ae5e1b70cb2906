"""Where the little redundancy of floats lives: byte planes, as ZipNN splits them.

Split every number into byte planes and compress each plane on its own, as ZipNN does
(Hershcovitch et al., "ZipNN: Lossless Compression for AI Models", 2024). ``split="exponent"``
first rotates the sign bit to the bottom of the word, so one plane holds exactly the 8 exponent
bits (ZipNN's bit reordering): exponents take few distinct values and compress, mantissas are
near random. It helps little with exact zeros (post-ReLU): those are a sparsity, for a sparse format.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from labkit.errors import LabkitError, require_choice
from labkit.predict.tables import text_table
from labkit.reduction.codecs import entropy_bits, measure, require_data

DTYPES = {"fp32": 4, "bf16": 2, "utf-8": 1}
SPLITS = ("bytes", "exponent")
_PLANE_NAMES = {
    ("fp32", "bytes"): ("sign+exp hi", "exp lo+man hi", "man mid", "man lo"),
    ("fp32", "exponent"): ("exponent", "man hi", "man mid", "man lo+sign"),
    ("bf16", "bytes"): ("sign+exp hi", "exp lo+man"),
    ("bf16", "exponent"): ("exponent", "man+sign"),
}



def to_bytes(t: torch.Tensor, dtype: str) -> bytes:
    """The little-endian bytes of a float tensor stored as ``fp32`` or ``bf16``."""
    require_choice("dtype", dtype, ("fp32", "bf16"))
    if not torch.is_tensor(t) or not t.is_floating_point():
        raise LabkitError(f"t must be a floating-point tensor (got {getattr(t, 'dtype', type(t).__name__)})")
    to, word, order = (torch.float32, torch.int32, "<i4") if dtype == "fp32" else (torch.bfloat16, torch.int16, "<i2")
    return t.detach().to(to).contiguous().view(word).numpy().astype(order).tobytes()


def split_planes(data: bytes, dtype: str, split: str = "exponent") -> dict[str, bytes]:
    """Byte planes, most significant first; ``split="exponent"`` first rotates the sign to the lowest bit."""
    require_choice("split", split, SPLITS)
    require_choice("dtype", dtype, ("fp32", "bf16"))
    bits = 8 * DTYPES[dtype]
    if len(require_data(data)) % (bits // 8):
        raise LabkitError(f"data must hold whole {dtype} numbers: {len(data)} bytes is not a multiple of {bits // 8}")
    w = np.frombuffer(data, dtype="<u4" if bits == 32 else "<u2")
    if split == "exponent":
        w = (w << 1) | (w >> (bits - 1))  # numpy keeps the word width, so the top bit falls off
    names = _PLANE_NAMES[(dtype, split)]
    return {n: ((w >> (bits - 8 * (i + 1))) & 0xFF).astype(np.uint8).tobytes() for i, n in enumerate(names)}


def join_planes(planes: dict[str, bytes], dtype: str, split: str = "exponent") -> bytes:
    """The inverse of ``split_planes``: the original bytes, bit for bit."""
    require_choice("split", split, SPLITS)
    require_choice("dtype", dtype, ("fp32", "bf16"))
    names = _PLANE_NAMES[(dtype, split)]
    if list(planes) != list(names):
        raise LabkitError(f"planes must be {', '.join(names)} for {dtype}/{split} (got {', '.join(planes)})")
    bits, kind = 8 * DTYPES[dtype], np.uint32 if dtype == "fp32" else np.uint16
    w = np.zeros(len(planes[names[0]]), dtype=kind)
    for i, n in enumerate(names):
        w |= np.frombuffer(planes[n], dtype=np.uint8).astype(kind) << kind(bits - 8 * (i + 1))
    if split == "exponent":
        w = (w >> 1) | (w << (bits - 1))
    return w.astype("<u4" if dtype == "fp32" else "<u2").tobytes()


@dataclass(frozen=True)
class PlaneStats:
    """One byte plane: how many distinct byte values it holds, its entropy, its zstd-3 ratio."""

    plane: str
    raw_bytes: int
    distinct: int
    entropy_bits: float
    ratio: float


def plane_stats(data: bytes, dtype: str, split: str = "exponent") -> list[PlaneStats]:
    """Per-plane entropy and measured zstd-3 ratio, most significant plane first."""
    return [PlaneStats(name, len(p), int(np.unique(np.frombuffer(p, dtype=np.uint8)).size), entropy_bits(p),
                       measure(p, "zstd-3").ratio) for name, p in split_planes(data, dtype, split).items()]


def fmt_ratio(x: float | None) -> str:
    """A ratio or entropy to 2 decimals; "-" for none, "inf" for an unbounded one."""
    return "-" if x is None else ("inf" if math.isinf(x) else f"{x:.2f}")


def plane_text(stats: list[PlaneStats]) -> str:
    """Per-plane table: distinct byte values, entropy, measured zstd-3 ratio."""
    body = [[s.plane, f"{s.raw_bytes / 1e3:.1f}", s.distinct, fmt_ratio(s.entropy_bits), fmt_ratio(s.ratio)]
            for s in stats]
    return text_table(["plane", "raw KB", "distinct", "H bits/B", "zstd-3"], body)
