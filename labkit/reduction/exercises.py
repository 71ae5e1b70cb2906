"""Self-check exercises of notebook 05, registered with ``labkit.teach.checks`` when imported."""

from __future__ import annotations

import torch

from labkit.predict.estimate import activation_bytes_per_layer, training_flops
from labkit.reduction.optim8bit import state_bytes
from labkit.reduction.tradeoffs import selective_extra_flops
from labkit.shapes import model_shape
from labkit.teach.checks import Exercise, Mistake, register

PARAMS_7B = 7_000_000_000


def _gpt3_full_recompute_mb(recompute: str = "full") -> float:
    return activation_bytes_per_layer(model_shape("gpt3-175b"), 2048, 1, recompute=recompute) / 1e6


def _adam8bit_gb(params: int = PARAMS_7B, moments: int = 2, scales: bool = True) -> float:
    per_moment = state_bytes(params, bits=8) / 2
    scale_bytes = per_moment - params  # one byte per value; the rest are the per-block fp32 scales
    return moments * (per_moment if scales else per_moment - scale_bytes) / 1e9


def _gpt3_selective_percent(early_stop: bool = True) -> float:
    gpt3 = model_shape("gpt3-175b")
    return 100 * selective_extra_flops(gpt3, 2048, 1, early_stop) / training_flops(gpt3, 2048, 1)


def _fp16_max() -> float:
    return float(torch.finfo(torch.float16).max)


register("05.full_recompute_mb", Exercise(
    "MB (1e6 bytes) one GPT-3 175B layer keeps for backward under full recompute (s = 2048, b = 1, 16-bit)?",
    _gpt3_full_recompute_mb,
    0.01,
    ("Full recompute throws away everything inside the layer and re-runs its forward in backward: what must it "
     "keep to be able to do that?",
     "Only the layer's input: s * b * h values of 2 bytes (h = 12,288)."),
    lambda: f"{_gpt3_full_recompute_mb():.1f} MB: 2sbh, against {_gpt3_full_recompute_mb('none'):,.0f} MB "
            "without recompute (Korthikanti's sbh(34 + 5as/h)).",
    (Mistake("s*b*h values counted, not bytes: each 16-bit value takes 2 bytes",
             lambda: _gpt3_full_recompute_mb() / 2),
     Mistake("4 bytes per value (fp32): the question says 16-bit", lambda: 2 * _gpt3_full_recompute_mb()),
     Mistake("the whole layer's activations, as without recompute", lambda: _gpt3_full_recompute_mb("none"))),
    unit="MB",
))
register("05.adam8bit_gb", Exercise(
    "GB (1e9 bytes) of Adam's two moments for a 7-billion-parameter model with block-wise 8-bit states "
    "(blocks of 2048, one fp32 scale per block per moment)?",
    _adam8bit_gb,
    0.001,  # the scales are 0.2% of the total: a looser tolerance would pass an answer without them
    ("Adam keeps two moments per parameter; in 8-bit, each value takes 1 byte. What does block-wise "
     "quantization add?",
     "1 byte per value per moment, plus 4 bytes per 2048 values per moment."),
    lambda: f"{_adam8bit_gb():.3f} GB, against {_adam8bit_gb() * 4:.0f} GB for two fp32 moments.",
    (Mistake("one Adam moment only: Adam keeps the momentum AND the variance", lambda: _adam8bit_gb(moments=1)),
     Mistake("the per-block fp32 scales left out (4 bytes per 2048 values per moment)",
             lambda: _adam8bit_gb(scales=False)),
     Mistake("two fp32 moments: 8-bit states take 1 byte per value, not 4", lambda: 8 * PARAMS_7B / 1e9)),
    unit="GB",
))
register("05.selective_percent", Exercise(
    "Per cent of extra compute selective recompute adds to a GPT-3 175B step (s = 2048, b = 1) when torch's "
    "checkpoint does it as section 2 measured (non-reentrant, early stop)?",
    _gpt3_selective_percent,
    0.05,
    ("Section 2 measured what torch repeats: Q K^T only, 2bs^2h FLOPs per layer.",
     "Divide 2bs^2h by the step's FLOPs per layer, 72BsLh^2(1 + s/6h + V/12Lh) / L, and give it in per cent."),
    lambda: f"{_gpt3_selective_percent():.2f}%. Re-running the core's whole forward (Q K^T and the product "
            f"with V, 4bs^2h a layer: Korthikanti et al.'s count) costs {_gpt3_selective_percent(False):.2f}%; "
            "the paper's 2.7% matches the core's forward and backward share of a step.",
    (Mistake("Korthikanti et al.'s count: both matmuls of the core's forward, which torch's early stop does not "
             "repeat", lambda: _gpt3_selective_percent(False)),
     Mistake("the paper's 2.7%: the core's forward and backward share, not what recompute repeats",
             lambda: 3 * _gpt3_selective_percent(False))),
    unit="%",
))
register("05.fp16_max", Exercise(
    "The largest finite fp16 number (torch.finfo)?",
    _fp16_max,
    0.0,
    ("fp16 has 5 exponent bits (bias 15, the all-ones exponent kept for inf and NaN) and 10 mantissa bits: what are "
     "the largest exponent and the largest significand?",
     "The largest exponent is 2^15 and the largest significand 2 - 2^-10: multiply them."),
    "65504: a gradient scaled past it becomes inf, and GradScaler skips the step and halves the scale.",
    (Mistake("2^16 = 65536: the significand is just under 2 (2 - 2^-10), not 2", lambda: 2.0**16),
     Mistake("2^15 = 32768: the significand 1.xxx forgotten", lambda: 2.0**15),
     Mistake("bf16's largest value: bf16 has 8 exponent bits", lambda: float(torch.finfo(torch.bfloat16).max))),
))
