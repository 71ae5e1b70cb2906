"""What recompute buys and costs at scale: selective recompute's two FLOP counts, and segment length.

Two questions the notebook answers with numbers, torch-free (the advisor may read this module):

* Selective recompute (Korthikanti et al., "Reducing Activation Recomputation in Large
  Transformer Models", 2022, section 5) checkpoints the attention core, Q K^T, softmax, dropout,
  and the product of the probabilities with V. Re-running the core's whole forward repeats both
  matmuls, 2bs^2h FLOPs each, 4bs^2h a layer: the paper's count, and ``estimate.training_flops``'s
  "selective". torch's non-reentrant ``checkpoint`` with ``early_stop`` (its default) stops
  recomputing as soon as every tensor backward needs is back; the last product saves its inputs,
  not its output, so only Q K^T is repeated: 2bs^2h a layer, what notebook 05 measures.
* Segment length: Chen et al. ("Training Deep Nets with Sublinear Memory Cost", 2016, section 4.1)
  cut n equal layers into segments of k, keep each segment's input and re-run one segment at a
  time, so the peak is about (n/k) * input + k * layer, least at k = sqrt(n) when a kept input
  costs as much as a layer's activations. A transformer layer's input is 2sbh bytes at 16 bits
  beside its sbh(34 + 5as/h) activations (Korthikanti et al.), so the best k is
  sqrt(n * input / layer): about one layer, which is per-layer full recompute.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from labkit.errors import require_positive
from labkit.predict.estimate import activation_bytes_per_layer, training_flops
from labkit.predict.tables import text_table
from labkit.reduction.design import segmented_activation_bytes, sqrt_segment
from labkit.shapes import ModelShape


def selective_extra_flops(shape: ModelShape, seq: int, micro_batch: int, early_stop: bool = False) -> float:
    """FLOPs selective recompute repeats in one step: 4bs^2h a layer (the core's forward), 2bs^2h with early stop.

    ``early_stop=False`` is Korthikanti et al.'s count (``estimate.training_flops(..., "selective")``
    less the step without recompute); ``early_stop=True`` is what torch's non-reentrant checkpoint
    repeats (Q K^T only), measured to the FLOP by ``recompute.compare_plans``.
    """
    extra = training_flops(shape, seq, micro_batch, "selective") - training_flops(shape, seq, micro_batch, "none")
    return extra / 2 if early_stop else extra


@dataclass(frozen=True)
class SelectiveTradeoff:
    """Selective recompute on one model: bytes a layer keeps without and with it, and the FLOPs it adds."""

    model: str
    seq: int
    none_bytes: float  # per layer, Korthikanti et al.'s sbh(34 + 5as/h) at 16 bits
    selective_bytes: float  # per layer, 34sbh: the 5as/h term is gone
    extra_early_stop: float  # fraction of a step without recompute: torch's early stop (Q K^T)
    extra_core_forward: float  # the core's whole forward (Q K^T and x V): Korthikanti et al.'s count
    core_share: float  # the core's forward and backward, 3 x 4bs^2h a layer, over the step

    @property
    def saved(self) -> float:
        """Fraction of a layer's activation bytes selective recompute removes: (5as/h) / (34 + 5as/h)."""
        return 1 - self.selective_bytes / self.none_bytes


def selective_tradeoff(shape: ModelShape, seq: int = 0, micro_batch: int = 1, act_bytes: int = 2,
                       mask_bytes: int = 1, name: str = "") -> SelectiveTradeoff:
    """Korthikanti et al.'s headline for ``shape`` (their GPT-3 175B: about 70% fewer bytes), computed."""
    s = seq or shape.seq
    require_positive("micro_batch", micro_batch)
    per_layer = {m: activation_bytes_per_layer(shape, s, micro_batch, act_bytes, mask_bytes, recompute=m)
                 for m in ("none", "selective")}
    base = training_flops(shape, s, micro_batch, "none")
    core = selective_extra_flops(shape, s, micro_batch)
    return SelectiveTradeoff(name or shape.name, s, per_layer["none"], per_layer["selective"],
                             selective_extra_flops(shape, s, micro_batch, early_stop=True) / base, core / base,
                             3 * core / base)


def measured_tradeoff(name: str, shape: ModelShape, seq: int, micro_batch: int, none_layer_bytes: int,
                      selective_layer_bytes: int, step_flops: int, extra_flops: int) -> SelectiveTradeoff:
    """The same figures from a real step (``recompute.compare_plans``): bytes of one layer without and with
    selective recompute and the FLOPs torch repeated; the core-forward count beside them is the formula's."""
    core = selective_extra_flops(shape, seq, micro_batch) / step_flops
    return SelectiveTradeoff(name, seq, float(none_layer_bytes), float(selective_layer_bytes),
                             extra_flops / step_flops, core, 3 * core)


def attention_ratio(shape: ModelShape, seq: int) -> float:
    """5as/h: Korthikanti et al.'s attention-score term beside the 34 of the rest of the layer."""
    return 5 * shape.heads * seq / shape.hidden


def selective_text(rows: list[tuple[SelectiveTradeoff, ModelShape]]) -> str:
    """Bytes per layer without and with selective recompute, the share saved, and the three FLOP figures."""
    return text_table(
        ["model", "s", "5as/h", "layer B, none", "layer B, selective", "saved", "extra FLOPs, torch early stop",
         "extra FLOPs, core forward", "core fwd + bwd share"],
        [[r.model, f"{r.seq:,}", f"{attention_ratio(shape, r.seq):.0f}", f"{r.none_bytes:,.0f}",
          f"{r.selective_bytes:,.0f}", f"{100 * r.saved:.1f}%", f"{100 * r.extra_early_stop:.2f}%",
          f"{100 * r.extra_core_forward:.2f}%", f"{100 * r.core_share:.2f}%"] for r, shape in rows])


@dataclass(frozen=True)
class SegmentRow:
    """One segment length: how many inputs are kept, how many layers are re-run at once, the peak bytes."""

    segment: int
    segments: int
    peak_bytes: float  # activations of the layers at their peak (``design.segmented_activation_bytes``)


def segment_sweep(shape: ModelShape, seq: int = 0, micro_batch: int = 1, act_bytes: int = 2, mask_bytes: int = 1,
                  segments: tuple[int, ...] = ()) -> list[SegmentRow]:
    """Peak activation bytes for each segment length (default: every divisor of the layer count).

    One convention for every row: the kept inputs plus the segment being re-run, so k = 1 (full
    recompute, one layer rebuilt at a time) and k = sqrt(L) (Chen et al.) are compared fairly.
    """
    s = seq or shape.seq
    ks = segments or tuple(k for k in range(1, shape.layers + 1) if shape.layers % k == 0)
    return [SegmentRow(k, -(-shape.layers // k),
                       segmented_activation_bytes(shape, s, micro_batch, act_bytes, mask_bytes, k)) for k in ks]


def best_segment_estimate(shape: ModelShape, seq: int = 0, micro_batch: int = 1, act_bytes: int = 2,
                          mask_bytes: int = 1) -> float:
    """k* = sqrt(L * input / layer), the minimum of (L/k) * input + k * layer (Chen et al.'s argument).

    Chen et al.'s sqrt(L) is the case input = layer; a transformer's input is far smaller.
    """
    s = seq or shape.seq
    layer = activation_bytes_per_layer(shape, s, micro_batch, act_bytes, mask_bytes, recompute="none")
    kept = activation_bytes_per_layer(shape, s, micro_batch, act_bytes, mask_bytes, recompute="full")
    return math.sqrt(shape.layers * kept / layer)


def segment_text(rows: list[SegmentRow], shape: ModelShape) -> str:
    """The sweep as a table, GB = 1e9 bytes, with Chen et al.'s sqrt(L) segment marked."""
    chen = sqrt_segment(shape.layers)
    return text_table(["layers per segment", "segments", "peak activations of the layers, GB", ""],
                      [[r.segment, r.segments, f"{r.peak_bytes / 1e9:.3f}",
                        "full recompute" if r.segment == 1 else "Chen's sqrt(L)" if r.segment == chen
                        else "no recompute" if r.segment == shape.layers else ""] for r in rows])
