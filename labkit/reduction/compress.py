"""Why compression fails on dense training data: zstd and lz4 on the run's own tensors, measured.

Lossless compressors find two kinds of redundancy: repeated strings (the LZ77 stage of zstd
and lz4) and skewed symbol statistics (zstd's Huffman and FSE coders). Text has both. The
weights, gradients, Adam moments and most activations of a training run have neither: their
bytes are close to uniform and never repeat, so a compressor saves a few percent. That is
why training saves memory by trading compute (recompute) or precision (bf16, 8-bit states).

Prediction beside measurement: the order-0 Shannon entropy H of the byte stream, in bits
per byte (Shannon 1948), bounds what a coder of independent bytes can reach: a ratio of
8 / H. zstd beats it when bytes depend on each other: its LZ77 stage replaces a repeated
string by a short reference (text; exact zero floats, as in post-ReLU and causally
masked attention); and its fresh Huffman table per block (at most 128 KiB) follows a
stream whose statistics change along the way (tensors of different scales, concatenated).

Where the little redundancy of floats lives: split every number into byte planes and
compress each plane on its own, as ZipNN does (Hershcovitch et al., "ZipNN: Lossless
Compression for AI Models", 2024). ``split="exponent"`` first rotates the sign bit to the
bottom of the word, so one plane holds exactly the 8 exponent bits (ZipNN's bit
reordering): exponents take few distinct values and compress, mantissas are near random.
It helps little with exact zeros (post-ReLU): those are a sparsity, for a sparse format.

Ratios are raw / compressed bytes, the same on every run (a seeded run, fixed threads);
speed is MB/s (MB = 1e6 bytes) from a wall clock, shown but never checked.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import lz4.frame
import numpy as np
import torch
import zstandard

from labkit.data import corpus, vocab_size
from labkit.errors import LabkitError, require_choice, require_positive
from labkit.measure import ModuleHooks
from labkit.model import GPTConfig
from labkit.tables import text_table
from labkit.train import TrainConfig, Trainer

CODECS = ("zstd-3", "zstd-19", "lz4")
DTYPES = {"fp32": 4, "bf16": 2, "utf-8": 1}
SPLITS = ("bytes", "exponent")
_PLANE_NAMES = {
    ("fp32", "bytes"): ("sign+exp hi", "exp lo+man hi", "man mid", "man lo"),
    ("fp32", "exponent"): ("exponent", "man hi", "man mid", "man lo+sign"),
    ("bf16", "bytes"): ("sign+exp hi", "exp lo+man"),
    ("bf16", "exponent"): ("exponent", "man+sign"),
}


def _require_data(data: bytes) -> bytes:
    if not isinstance(data, (bytes, bytearray, memoryview)) or len(data) == 0:
        raise LabkitError(f"data must be non-empty bytes (got {type(data).__name__} {data!r:.24})")
    return bytes(data)


def compress(data: bytes, codec: str = "zstd-3") -> bytes:
    """Compress with zstd (level 3 or 19, one thread) or lz4 (the default frame)."""
    data = _require_data(data)
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
    counts = np.bincount(np.frombuffer(_require_data(data), dtype=np.uint8), minlength=256)
    p = counts[counts > 0] / counts.sum()
    return float(max(0.0, -(p * np.log2(p)).sum()))


def entropy_bound(data: bytes) -> float:
    """8 / H: the best ratio of a coder that codes each byte on its own (inf for a constant stream)."""
    return math.inf if (h := entropy_bits(data)) == 0.0 else 8.0 / h


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
    if len(_require_data(data)) % (bits // 8):
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
    data = _require_data(data)
    t0 = time.perf_counter()
    blob = compress(data, codec)
    speed = len(data) / 1e6 / max(time.perf_counter() - t0, 1e-9)
    return CodecResult(codec, len(data), len(blob), decompress(blob, codec) == data, speed)


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


@dataclass(frozen=True)
class CompressionRow:
    """Measured ratios of one byte stream beside its order-0 entropy bound, unsplit and split."""

    kind: str
    dtype: str
    raw_bytes: int
    entropy_bits: float
    entropy_bound: float
    zstd3: float
    zstd19: float
    lz4: float
    split_bound: float | None  # 8 * raw / sum of plane entropies * plane bytes: the bound after splitting
    split_ratio: float | None  # raw / sum of the zstd-3 sizes of the planes (floats only)
    mb_per_s: tuple[float, float, float]  # zstd-3, zstd-19, lz4: shown, never checked


def measure_row(kind: str, dtype: str, data: bytes, split: str = "exponent") -> CompressionRow:
    """Every codec on one stream, its entropy bound, and its byte-plane split (floats only)."""
    require_choice("dtype", dtype, DTYPES)
    results = [measure(data, c) for c in CODECS]
    if not all(r.round_trip for r in results):
        raise RuntimeError(f"a codec did not give back the bytes of {kind} unchanged")
    split_bound = split_ratio = None
    if dtype != "utf-8":
        planes = split_planes(data, dtype, split).values()
        coded_bits = sum(entropy_bits(p) * len(p) for p in planes)
        split_bound = math.inf if coded_bits == 0 else 8 * len(data) / coded_bits
        split_ratio = len(data) / sum(len(compress(p, "zstd-3")) for p in planes)
    return CompressionRow(kind, dtype, len(data), entropy_bits(data), entropy_bound(data),
                          *(r.ratio for r in results), split_bound, split_ratio, tuple(r.mb_per_s for r in results))


@dataclass(frozen=True)
class CompressConfig:
    """The micro run whose tensors are compressed, and the corpus bytes beside them.

    Dropout is off, as in most large-model pretraining: its zeros would be a second ReLU."""

    n_layer: int = 2
    d_model: int = 64
    seq_len: int = 32
    batch_size: int = 4
    steps: int = 5
    dropout: float = 0.0
    seed: int = 0
    text_bytes: int = 131072

    def __post_init__(self) -> None:
        for name in ("n_layer", "d_model", "seq_len", "batch_size", "steps", "text_bytes"):
            require_positive(name, getattr(self, name))


class _Grab(ModuleHooks):
    """Keeps a copy of every floating-point storage autograd saves, whole, and the module that saved it."""

    def __init__(self, model: torch.nn.Module, exclude: tuple[torch.Tensor, ...]) -> None:
        super().__init__(model)
        self.skip = {t.untyped_storage().data_ptr() for t in (*model.parameters(), *exclude)}
        self.kept: dict[int, tuple[str, torch.Tensor]] = {}

    def _pack(self, t: torch.Tensor) -> torch.Tensor:
        key = t.untyped_storage().data_ptr()
        if key not in self.skip and key not in self.kept and t.is_floating_point() and t.numel():
            self.kept[key] = (self.module, torch.empty(0, dtype=t.dtype).set_(t.untyped_storage()).detach().clone())
        return t


def _flat(ts) -> torch.Tensor:
    return torch.cat([t.detach().float().flatten() for t in ts])


def run_tensors(cfg: CompressConfig | None = None) -> dict[str, torch.Tensor]:
    """Flat fp32 tensors of a real fp32 run at step ``cfg.steps``, by kind: weights, gradients, Adam's m, v;

    "activations": every float tensor its forward saved; "attention probs": what the softmax saved
    (half zeros, the causal mask); "post-relu": ReLU of the MLP's real pre-activations. The model uses
    GELU, which has no exact zeros: post-relu shows what a ReLU network would save, not this one."""
    cfg = cfg or CompressConfig()
    model = GPTConfig(vocab_size=vocab_size(), seq_len=cfg.seq_len, n_layer=cfg.n_layer, d_model=cfg.d_model,
                      dropout=cfg.dropout)
    trainer = Trainer(TrainConfig(model=model, batch_size=cfg.batch_size, seed=cfg.seed))
    trainer.run(cfg.steps)
    params, state = list(trainer.model.parameters()), trainer.optimizer.state
    x, y = trainer.data(cfg.steps)
    with _Grab(trainer.model, (x, y)) as grab:
        _, loss = trainer.model(x, y)
    loss.backward()
    saved = list(grab.kept.values())
    return {
        "weights": _flat(params),
        "gradients": _flat(p.grad for p in params),
        "adam m": _flat(state[p]["exp_avg"] for p in params),
        "adam v": _flat(state[p]["exp_avg_sq"] for p in params),
        "activations": _flat(t for _, t in saved),
        "attention probs": _flat(t for m, t in saved if m.endswith("core.softmax")),
        "post-relu": torch.relu(_flat(t for m, t in saved if m.endswith("mlp.act"))),
    }


def samples(cfg: CompressConfig | None = None) -> dict[tuple[str, str], bytes]:
    """The bytes to compress, by (kind, dtype): each tensor in fp32 and bf16, then the corpus (UTF-8)."""
    cfg = cfg or CompressConfig()
    out = {(k, d): to_bytes(t, d) for k, t in run_tensors(cfg).items() for d in ("fp32", "bf16")}
    return {**out, ("text", "utf-8"): corpus().encode("utf-8")[: cfg.text_bytes]}


def compression_table(data: dict[tuple[str, str], bytes], split: str = "exponent") -> list[CompressionRow]:
    """One measured row per stream of ``samples()``: what the notebook tabulates."""
    require_choice("split", split, SPLITS)
    return [measure_row(kind, dtype, b, split) for (kind, dtype), b in data.items()]


def _fmt(x: float | None) -> str:
    return "-" if x is None else ("inf" if math.isinf(x) else f"{x:.2f}")


def ratio_text(rows: list[CompressionRow], speed: bool = False) -> str:
    """Ratios to 2 decimals beside the entropy and its bound; ``speed``: MB/s instead (differs every run)."""
    if speed:
        body = [[r.kind, r.dtype, *(f"{s:.0f}" for s in r.mb_per_s)] for r in rows]
        return text_table(["data", "dtype", *(f"{c} MB/s" for c in CODECS)], body)
    head = ["data", "dtype", "raw KB", "H bits/B", "8/H", "zstd-3", "zstd-19", "lz4", "split 8/H", "split zstd-3"]
    return text_table(head, [[r.kind, r.dtype, f"{r.raw_bytes / 1e3:.1f}", *map(_fmt, (
        r.entropy_bits, r.entropy_bound, r.zstd3, r.zstd19, r.lz4, r.split_bound, r.split_ratio))] for r in rows])


def plane_text(stats: list[PlaneStats]) -> str:
    """Per-plane table: distinct byte values, entropy, measured zstd-3 ratio."""
    body = [[s.plane, f"{s.raw_bytes / 1e3:.1f}", s.distinct, _fmt(s.entropy_bits), _fmt(s.ratio)] for s in stats]
    return text_table(["plane", "raw KB", "distinct", "H bits/B", "zstd-3"], body)
