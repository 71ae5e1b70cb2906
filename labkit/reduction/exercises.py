"""Self-check exercises of notebook 05, registered with ``labkit.teach.checks`` when imported."""

from __future__ import annotations

import torch

from labkit.predict.estimate import activation_bytes_per_layer, training_flops
from labkit.reduction.optim8bit import state_bytes
from labkit.reduction.tradeoffs import selective_extra_flops
from labkit.shapes import model_shape
from labkit.teach.checks import Exercise, Mistake, register


def _gpt3_full_recompute_mb(recompute: str = "full") -> float:
    return activation_bytes_per_layer(model_shape("gpt3-175b"), 2048, 1, recompute=recompute) / 1e6


def _adam8bit_gb(params: int = 7_000_000_000) -> float:
    return state_bytes(params, bits=8) / 1e9


def _gpt3_selective_percent(early_stop: bool = True) -> float:
    gpt3 = model_shape("gpt3-175b")
    return 100 * selective_extra_flops(gpt3, 2048, 1, early_stop) / training_flops(gpt3, 2048, 1)


def _fp16_max() -> float:
    return float(torch.finfo(torch.float16).max)


register("05.full_recompute_mb", Exercise(
    "MB (1e6 bytes) one GPT-3 175B layer keeps for backward under full recompute (s = 2048, b = 1, 16-bit)?",
    _gpt3_full_recompute_mb,
    0.01,
    "Full recompute keeps only the layer's input: s * b * h values of 2 bytes (h = 12,288).",
    lambda: f"{_gpt3_full_recompute_mb():.1f} MB: 2sbh, against {_gpt3_full_recompute_mb('none'):,.0f} MB "
            "without recompute (Korthikanti's sbh(34 + 5as/h)).",
))
register("05.adam8bit_gb", Exercise(
    "GB (1e9 bytes) of Adam's two moments for a 7-billion-parameter model with block-wise 8-bit states "
    "(blocks of 2048, one fp32 scale per block per moment)?",
    _adam8bit_gb,
    0.01,
    "1 byte per value per moment, plus 4 bytes per 2048 values per moment.",
    lambda: f"{_adam8bit_gb():.2f} GB, against 56 GB for two fp32 moments.",
))
register("05.selective_percent", Exercise(
    "Per cent of extra compute selective recompute adds to a GPT-3 175B step (s = 2048, b = 1) when torch's "
    "checkpoint does it as section 2 measured (non-reentrant, early stop)?",
    _gpt3_selective_percent,
    0.05,
    "Section 2 measured what torch repeats: Q K^T only, 2bs^2h FLOPs per layer. Divide by the step's "
    "72BsLh^2(1 + s/6h + V/12Lh).",
    lambda: f"{_gpt3_selective_percent():.2f}%. Re-running the core's whole forward (Q K^T and the product "
            f"with V, 4bs^2h a layer: Korthikanti et al.'s count) costs {_gpt3_selective_percent(False):.2f}%; "
            "the paper's 2.7% matches the core's forward and backward share of a step.",
    (Mistake("Korthikanti et al.'s count: both matmuls of the core's forward, which torch's early stop does not "
             "repeat", lambda: _gpt3_selective_percent(False)),
     Mistake("the paper's 2.7%: the core's forward and backward share, not what recompute repeats",
             lambda: 3 * _gpt3_selective_percent(False))),
))
register("05.fp16_max", Exercise(
    "The largest finite fp16 number (torch.finfo)?",
    _fp16_max,
    0.0,
    "5 exponent bits, 10 mantissa bits: (2 - 2^-10) * 2^15.",
    "65504: a gradient scaled past it becomes inf, and GradScaler skips the step and halves the scale.",
))
