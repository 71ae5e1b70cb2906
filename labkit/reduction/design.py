"""Scale and design: recompute mode, precision and optimizer-state bits for a real model on a real GPU.

Everything ``labkit.predict.estimate`` already knows (model states under a precision, Korthikanti et al.'s
activations with recompute none, selective or full, the FLOPs of a step) comes from there; this
module adds the two things it lacks, each with its paper:

* ``"sqrt"`` recompute: Chen et al., "Training Deep Nets with Sublinear Memory Cost", 2016:
  cut the L layers into segments of about sqrt(L) layers, keep only each segment's input and re-run
  one segment at a time during backward (as ``torch.utils.checkpoint.checkpoint_sequential`` does,
  which leaves its last segment un-checkpointed);
* 8-bit optimizer states: Dettmers et al., "8-bit Optimizers via Block-wise Quantization", ICLR
  2022: Adam's two moments stored in 1 byte each, plus one fp32 absmax scale per block of 2048
  elements and per state, so about 2 bytes per parameter instead of 8.

Memory is per device with no parallelism (one GPU, ZeRO stage 0); bytes throughout, GB = 1e9 bytes
only in the text a person reads. A GPU holds its true capacity (``Device.memory_bytes``: an "80 GB"
A100 holds 80 GiB = 85.9e9 bytes), and fit verdicts use it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from labkit import hardware
from labkit.errors import LabkitError, require_choice, require_positive
from labkit.hardware import Device
from labkit.predict.estimate import (
    PRECISIONS,
    TrainingSetup,
    activation_bytes_outside_layers,
    activation_bytes_per_layer,
    estimate_memory,
    training_flops,
)
from labkit.shapes import ModelShape, model_shape

RECOMPUTE_MODES = ("none", "selective", "sqrt", "full")
PRECISION_NAMES = tuple(PRECISIONS)  # no "pure bf16" (no master weights): labkit.predict.estimate does not model it
OPTIMIZER_BITS = (32, 8)
ADAM_STATES = 2  # first and second moment
ADAM_STATE_BYTES = 4 * ADAM_STATES  # per parameter in fp32: the part of K that 8-bit states replace
BLOCK = 2048  # elements per absmax block (Dettmers et al. 2022, section 2)
SCALE_BYTES = 4  # one fp32 absmax per block
CATEGORIES = ("parameters", "gradients", "optimizer", "activations")


def blockwise_state_bytes(params: int, states: int = ADAM_STATES, block: int = BLOCK) -> int:
    """Bytes of ``states`` block-wise 8-bit tensors of ``params`` elements (Dettmers et al., ICLR 2022).

    One byte per element and one fp32 absmax per block of ``block`` elements, per state; the
    parameters are treated as one flat buffer (blocking each tensor apart adds at most one block
    per tensor). At 2048 elements a block the scales cost 4/2048 of a byte per element.
    """
    require_positive("params", params)
    require_positive("states", states)
    require_positive("block", block)
    return states * (params + SCALE_BYTES * math.ceil(params / block))


def optimizer_state_bytes(params: int, precision: str = "bf16-mixed", bits: int = 32) -> float:
    """Adam's bytes for ``params`` parameters: K * Psi at 32 bits (ZeRO, SC 2020), 8-bit moments at 8.

    At 8 bits only the two moments shrink; the fp32 master weights of mixed precision stay
    (K = 12 becomes 4 + about 2 bytes per parameter).
    """
    require_choice("precision", precision, PRECISION_NAMES)
    require_choice("optimizer_bits", bits, OPTIMIZER_BITS)
    k = PRECISIONS[precision].optimizer * params
    return float(k if bits == 32 else k - ADAM_STATE_BYTES * params + blockwise_state_bytes(params))


def sqrt_segment(layers: int) -> int:
    """Layers per segment in Chen et al.'s sqrt(n) scheme: floor(sqrt(L)), at least 1."""
    require_positive("layers", layers)
    return max(1, math.isqrt(layers))


def _segments(layers: int, segment: int) -> tuple[int, int]:
    """(segments, layers in the last one): all but the last hold ``segment`` layers."""
    require_positive("segment", segment)
    if segment > layers:
        raise LabkitError(f"segment must be between 1 and layers={layers} (got {segment})")
    n = -(-layers // segment)
    return n, layers - (n - 1) * segment


def segmented_activation_bytes(shape: ModelShape, seq: int, micro_batch: int, act_bytes: int = 2,
                               mask_bytes: int = 1, segment: int = 0) -> float:
    """Peak activation bytes of the layers under segment checkpointing (Chen et al. 2016, section 4).

    Segments of ``segment`` layers (0: sqrt(L)); every segment but the last keeps only its input
    (the e*sbh a layer keeps under full recompute, Korthikanti et al.), the last keeps everything.
    The peak is the larger of: the end of forward, (n-1) inputs + the last segment's layers; and
    the backward of the last checkpointed segment, (n-2) other inputs + its k re-run layers (its own
    input is the tensor its first layer keeps). Unlike ``estimate``'s "full" (stored bytes only,
    as in Korthikanti's Table 2), this counts the re-run segment: that transient is the trade.
    """
    k = segment or sqrt_segment(shape.layers)
    n, last = _segments(shape.layers, k)
    layer = activation_bytes_per_layer(shape, seq, micro_batch, act_bytes, mask_bytes, recompute="none")
    kept = activation_bytes_per_layer(shape, seq, micro_batch, act_bytes, mask_bytes, recompute="full")
    forward_end = (n - 1) * kept + last * layer
    backward = (n - 2) * kept + k * layer if n >= 2 else 0.0
    return max(forward_end, backward)


def extra_compute(shape: ModelShape, seq: int, micro_batch: int, recompute: str = "none", segment: int = 0) -> float:
    """FLOPs recompute repeats, as a fraction of a step without it (``estimate.training_flops``).

    full: one more forward of every layer (4x forward instead of 3x, less the output layer);
    selective: the forward of the attention core alone, Q K^T and softmax(.) V, 4*b*s^2*h per
    layer (Korthikanti et al. 2022, section 5; torch's early stop repeats half of it, see
    ``tradeoffs.selective_extra_flops``); sqrt: the forward of every checkpointed segment, all
    layers but the last segment (Chen et al. 2016).
    """
    require_choice("recompute", recompute, RECOMPUTE_MODES)
    base = training_flops(shape, seq, micro_batch, "none")
    if recompute != "sqrt":
        return (training_flops(shape, seq, micro_batch, recompute) - base) / base
    _, last = _segments(shape.layers, segment or sqrt_segment(shape.layers))
    per_layer = (training_flops(shape, seq, micro_batch, "full") - base) / shape.layers
    return (shape.layers - last) * per_layer / base


def attention_core_share(shape: ModelShape, seq: int, micro_batch: int) -> float:
    """The attention core's FLOPs, forward and backward (3 x 4bs^2h a layer), over the whole step.

    Korthikanti et al. 2022 quote 2.7% as selective recompute's overhead for GPT-3 175B; that is
    this share, s/(6h) / (1 + s/(6h) + V/(12Lh)). Re-doing the core's forward alone, which is all
    selective recompute repeats, costs a third of it (``extra_compute``), and torch's early stop
    a sixth (``tradeoffs.selective_extra_flops``).
    """
    base = training_flops(shape, seq, micro_batch, "none")
    return 3 * (training_flops(shape, seq, micro_batch, "selective") - base) / base


@dataclass(frozen=True)
class Design:
    """One combination on one GPU: bytes by category, the fit, and the compute recompute adds."""

    model: str
    gpu: str
    micro_batch: int
    seq: int
    recompute: str
    precision: str
    optimizer_bits: int
    params: int
    parameters_bytes: float
    gradients_bytes: float
    optimizer_bytes: float
    activations_bytes: float
    capacity_bytes: int
    extra_compute: float  # fraction of a step without recompute
    reason: str  # why it does not fit; "" when it fits

    @property
    def total_bytes(self) -> float:
        return self.parameters_bytes + self.gradients_bytes + self.optimizer_bytes + self.activations_bytes

    @property
    def fits(self) -> bool:
        return self.total_bytes <= self.capacity_bytes

    @property
    def by_category(self) -> dict[str, float]:
        """{category: bytes}, the keys ``plots.memory_bars`` colours."""
        return {c: getattr(self, f"{c}_bytes") for c in CATEGORIES}

    @property
    def label(self) -> str:
        return f"recompute {self.recompute}, {self.precision}, {self.optimizer_bits}-bit Adam states"


def capacity_text(device: Device) -> str:
    """A GPU's true capacity in GB (1e9 B) and GiB beside the figure it is sold as (an "80 GB" A100 holds 80 GiB)."""
    cap = device.memory_bytes
    return f"{cap / 1e9:.1f} GB = {cap / 2**30:.1f} GiB, sold as {device.memory_nominal_bytes / 1e9:g} GB"


def _why(parts: dict[str, float], device: Device) -> str:
    total, states = sum(parts.values()), parts["parameters"] + parts["gradients"] + parts["optimizer"]
    capacity = device.memory_bytes
    if total <= capacity:
        return ""
    over = (total - capacity) / 1e9
    short = f"needs {total / 1e9:.1f} GB, the {device.name} holds {capacity_text(device)} (short by {over:.1f} GB)"
    if states > capacity:
        return (f"{short}: model states alone take {states / 1e9:.1f} GB, so no recompute mode can fit; "
                "it needs fewer bytes per parameter or the states sharded across GPUs")
    return (f"{short}: model states take {states / 1e9:.1f} GB, activations {parts['activations'] / 1e9:.1f} GB "
            "(recompute shrinks only the activations)")


def evaluate(model: str | ModelShape, gpu: str | Device, micro_batch: int = 1, seq: int = 0,
             recompute: str = "none", precision: str = "bf16-mixed", optimizer_bits: int = 32) -> Design:
    """Bytes, fit and extra compute of one combination; ``seq`` 0 is the model's own context length.

    Where the settings overlap with ``estimate.estimate_memory`` (recompute none, selective or
    full, 32-bit states) the bytes are its bytes exactly.
    """
    shape = model if isinstance(model, ModelShape) else model_shape(model)
    device = gpu if isinstance(gpu, Device) else hardware.gpu(gpu)
    require_choice("recompute", recompute, RECOMPUTE_MODES)
    require_choice("precision", precision, PRECISION_NAMES)
    require_choice("optimizer_bits", optimizer_bits, OPTIMIZER_BITS)
    setup = TrainingSetup(shape, micro_batch=micro_batch, seq=seq, precision=precision,
                          recompute="none" if recompute == "sqrt" else recompute,
                          attention="explicit")  # the s x s scores held: what selective recompute saves
    parts = dict(estimate_memory(setup).per_device_bytes)
    parts.pop("total")
    s, e = setup.seq_len, PRECISIONS[precision].activation
    if recompute == "sqrt":
        parts["activations"] = (segmented_activation_bytes(shape, s, micro_batch, e, setup.mask_bytes)
                                + activation_bytes_outside_layers(shape, s, micro_batch, e, setup.mask_bytes))
    if optimizer_bits != 32:
        parts["optimizer"] = optimizer_state_bytes(shape.params, precision, optimizer_bits)
    return Design(
        shape.name, device.name, micro_batch, s, recompute, precision, optimizer_bits, shape.params,
        *(float(parts[c]) for c in CATEGORIES), device.memory_bytes,
        extra_compute(shape, s, micro_batch, recompute), _why(parts, device),
    )


def grid(model: str | ModelShape, gpu: str | Device, micro_batch: int = 1, seq: int = 0) -> list[Design]:
    """Every recompute mode x precision x optimizer-state width, in that nested order."""
    return [evaluate(model, gpu, micro_batch, seq, r, p, b)
            for r in RECOMPUTE_MODES for p in PRECISION_NAMES for b in OPTIMIZER_BITS]


def cheapest_fit(model: str | ModelShape, gpu: str | Device, micro_batch: int = 1, seq: int = 0) -> Design | None:
    """The combination that fits with the least extra compute, then the least memory; None if none fits.

    Ties (bf16 and fp16 mixed hold the same bytes) go to the earlier in ``grid``'s order.
    """
    fitting = [d for d in grid(model, gpu, micro_batch, seq) if d.fits]
    return min(fitting, key=lambda d: (d.extra_compute, d.total_bytes), default=None)
