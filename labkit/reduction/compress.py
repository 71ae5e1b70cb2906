"""Why compression fails on dense training data: zstd and lz4 on the run's own tensors, measured.

Text has both kinds of redundancy a lossless compressor finds (``codecs``). The weights,
gradients, Adam moments and most activations of a training run have neither: their bytes are
close to uniform and never repeat, so a compressor saves a few percent. That is why training
saves memory by trading compute (recompute) or precision (bf16, 8-bit states). Beside the run's
tensors: real text that ships with Python (``corpora``) and, labelled as such, the lab's own
synthetic corpus, whose small grammar repeats far more than real text does.

Ratios are raw / compressed bytes, the same on every run and every CPU: the seeded run trains in
float64 and its tensors are stored as fp32 and bf16, as a training run holds them (an fp32 run's
last bits, and so a compressor's matches, change with the CPU's kernels; float64's drift, about
1e-14 of a weight over this run, is far below an fp32 rounding step and was measured not to reach
the stored bytes on any setting the portability tier tries), and the text is the same Python's
standard library; speed is MB/s
(MB = 1e6 bytes), shown but never checked. The byte-plane split of floats is ``planes``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from labkit.errors import require_choice, require_positive
from labkit.measure import ModuleHooks
from labkit.predict.tables import text_table
from labkit.reduction.codecs import CODECS, compress, entropy_bits, entropy_bound, measure
from labkit.reduction.corpora import STDLIB_TEXTS, stdlib_text
from labkit.reduction.planes import DTYPES, SPLITS, fmt_ratio, split_planes, to_bytes
from labkit.rig.data import corpus, vocab_size
from labkit.rig.model import GPTConfig
from labkit.rig.train import TrainConfig, Trainer


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


def _exact_key_bias_gradient(model: torch.nn.Module) -> None:
    """Give each key bias its exact gradient, zero: softmax ignores a shift shared by a row's scores, and q . b_k
    is one, so the computed gradient is rounding noise (about 1e-18 in fp64) whose digits, and after Adam's
    steps the bias's own tiny values and their exponents, differ from CPU to CPU."""
    for block in model.h:
        h = block.attn.c_attn.out_features // 3
        block.attn.c_attn.bias.register_hook(lambda g, h=h: torch.cat([g[:h], torch.zeros_like(g[h:2 * h]), g[2 * h:]]))


def run_tensors(cfg: CompressConfig | None = None) -> dict[str, torch.Tensor]:
    """Flat fp32 tensors of a real run at step ``cfg.steps``, by kind: weights, gradients, Adam's m, v;

    "activations": every float tensor its forward saved; "attention probs": what the softmax saved
    (half zeros, the causal mask); "post-relu": ReLU of the MLP's real pre-activations. The model uses
    GELU, which has no exact zeros: post-relu shows what a ReLU network would save, not this one.
    The run is in float64 (``precision="fp64"``), its tensors rounded to fp32: bytes no CPU changes."""
    cfg = cfg or CompressConfig()
    model = GPTConfig(vocab_size=vocab_size(), seq_len=cfg.seq_len, n_layer=cfg.n_layer, d_model=cfg.d_model,
                      dropout=cfg.dropout)
    trainer = Trainer(TrainConfig(model=model, batch_size=cfg.batch_size, seed=cfg.seed, precision="fp64"))
    _exact_key_bias_gradient(trainer.model)
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
    """The bytes to compress, by (kind, dtype): each tensor in fp32 and bf16, then text (UTF-8).

    Text: two real samples that ship with Python (``corpora.STDLIB_TEXTS``), then the lab's
    synthetic corpus, labelled "synthetic": its grammar has a few dozen words, so it repeats
    more than real text and compresses about three times as well."""
    cfg = cfg or CompressConfig()
    out = {(k, d): to_bytes(t, d) for k, t in run_tensors(cfg).items() for d in ("fp32", "bf16")}
    text = {(f"text: {name}", "utf-8"): stdlib_text(name, cfg.text_bytes) for name in STDLIB_TEXTS}
    return {**out, **text, ("text: synthetic (lab)", "utf-8"): corpus().encode("utf-8")[: cfg.text_bytes]}


def compression_table(data: dict[tuple[str, str], bytes], split: str = "exponent") -> list[CompressionRow]:
    """One measured row per stream of ``samples()``: what the notebook tabulates."""
    require_choice("split", split, SPLITS)
    return [measure_row(kind, dtype, b, split) for (kind, dtype), b in data.items()]


def speed_trends(rows: list[CompressionRow]) -> dict[str, bool]:
    """What notebook 05 says of the speed table, each True or False: lz4 is faster than zstd-3 and zstd-3 than
    zstd-19 on every stream, and no row's zstd-3 speed is a tenth of the median row's (issue 40: an untimed
    first call was missing, and the table's first row read 56 MB/s beside 500-800)."""
    fast = sorted(r.mb_per_s[0] for r in rows)
    return {"lz4 > zstd-3 > zstd-19 on every stream": all(r.mb_per_s[2] > r.mb_per_s[0] > r.mb_per_s[1] for r in rows),
            "no row's zstd-3 below a tenth of the median row's": fast[0] > fast[len(fast) // 2] / 10}


def ratio_text(rows: list[CompressionRow], speed: bool = False) -> str:
    """Ratios to 2 decimals beside the entropy and its bound; ``speed``: MB/s instead (differs every run)."""
    if speed:
        body = [[r.kind, r.dtype, *(f"{s:.0f}" for s in r.mb_per_s)] for r in rows]
        return text_table(["data", "dtype", *(f"{c} MB/s" for c in CODECS)], body)
    head = ["data", "dtype", "raw KB", "H bits/B", "8/H", "zstd-3", "zstd-19", "lz4", "split 8/H", "split zstd-3"]
    return text_table(head, [[r.kind, r.dtype, f"{r.raw_bytes / 1e3:.1f}", *map(fmt_ratio, (
        r.entropy_bits, r.entropy_bound, r.zstd3, r.zstd19, r.lz4, r.split_bound, r.split_ratio))] for r in rows])
