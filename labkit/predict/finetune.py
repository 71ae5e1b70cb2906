"""LoRA and QLoRA fine-tuning, predicted to the byte: frozen base, adapters, their gradients and states, activations.

LoRA (Hu et al., ICLR 2022) freezes every weight of the model and trains, beside chosen matrices W
(in x out), a low-rank product B A with A (r x in) and B (out x r): r (in + out) parameters each.
Only those get gradients and AdamW states; the base is held once at its precision. QLoRA (Dettmers et
al., NeurIPS 2023) stores the frozen matrices in NF4: half a byte a weight, plus an fp32 absmax per
block of 64 (4/64 = 0.0625 bytes a weight), or, with double quantization, an int8 scale per block, an
fp32 scale per 256 blocks and one fp32 mean per matrix (``labkit.measure.nf4``); embeddings, norms,
biases and the output layer stay 16-bit.

Activations are what a frozen network still keeps for the backward through it (measured on the CPU,
``tests/test_finetune_measure.py``): a frozen linear layer keeps nothing (its input is only needed for
its weight's gradient); a frozen RMSNorm weight no longer keeps the normalised copy; LayerNorm, the
attention kernel and the MLP's activation keep all they keep in full training (the gradient must pass
through them). Each adapter keeps its input (shared by the adapters that read the same tensor) and its
r-wide intermediate. Before the first adapter of the first layer nothing needs a gradient, so nothing
is kept there (the first norm, for instance); GPT-2's position ids and the output layer's input go too.
With gradient checkpointing (``torch.utils.checkpoint``, non-reentrant) a layer keeps only its input,
e*b*s*h, and one layer's activations are rebuilt at a time in backward.

Assumed, and refused otherwise by the measuring side: sdpa attention, no dropout (LoRA dropout 0 too),
no KV cache while training.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from labkit.errors import LabkitError, require_choice, require_positive
from labkit.predict.activation_terms import ActivationTerm
from labkit.shapes import ModelShape

METHODS = ("lora", "qlora")
LLAMA_TARGETS = ("q", "k", "v", "o", "gate", "up", "down")
GPT2_TARGETS = ("qkv", "o", "up", "down")
MODULE_NAMES = {  # short name -> the module's name inside a layer (peft's target_modules suffix)
    False: {"qkv": "attn.c_attn", "o": "attn.c_proj", "up": "mlp.c_fc", "down": "mlp.c_proj"},
    True: {"q": "self_attn.q_proj", "k": "self_attn.k_proj", "v": "self_attn.v_proj", "o": "self_attn.o_proj",
           "gate": "mlp.gate_proj", "up": "mlp.up_proj", "down": "mlp.down_proj"},
}
DEFAULT_TARGETS = {False: ("qkv",), True: ("q", "v")}  # the LoRA paper's W_q and W_v (GPT-2: its fused QKV)
BLOCK, SCALE_BLOCK = 64, 256


def allowed_targets(gated: bool) -> tuple[str, ...]:
    return LLAMA_TARGETS if gated else GPT2_TARGETS


def parse_targets(text: str | None, gated: bool) -> tuple[str, ...]:
    """``"q,v"``, ``"all-linear"`` or None (the default) as target names in the layer's order."""
    allowed = allowed_targets(gated)
    if text is None:
        return DEFAULT_TARGETS[gated]
    if text.strip() == "all-linear":
        return allowed
    names = [t.strip() for t in text.split(",") if t.strip()]
    for name in names:
        if name not in allowed:
            raise LabkitError(f"lora_targets must be names from {', '.join(allowed)} or all-linear (got {name!r})")
    if not names:
        raise LabkitError(f"lora_targets must name at least one of {', '.join(allowed)} (got {text!r})")
    return tuple(t for t in allowed if t in names)


def matrix_shapes(shape: ModelShape) -> dict[str, tuple[int, int]]:
    """(in, out) of every linear layer of one layer, by short name, in registration order."""
    h, f, kv = shape.hidden, shape.ffn_size, shape.kv_hidden
    if shape.gated:
        return {"q": (h, h), "k": (h, kv), "v": (h, kv), "o": (h, h), "gate": (h, f), "up": (h, f), "down": (f, h)}
    return {"qkv": (h, 3 * h), "o": (h, h), "up": (h, f), "down": (f, h)}


@dataclass(frozen=True)
class Finetune:
    """A parameter-efficient fine-tune: LoRA's rank and targets, QLoRA's storage, and the levers."""

    method: str = "lora"
    rank: int = 8
    targets: tuple[str, ...] = ("q", "v")
    alpha: float | None = None  # LoRA's scale alpha / r (default 2 r); it changes no byte
    double_quant: bool = False  # QLoRA: 8-bit scales of the scales
    paged: bool = False  # optimizer states on the host (QLoRA's paged optimizers), off the device
    checkpointing: bool = False  # gradient checkpointing of every layer

    def __post_init__(self) -> None:
        require_choice("finetune", self.method, METHODS)
        if not isinstance(self.rank, int) or isinstance(self.rank, bool) or self.rank < 1:
            raise LabkitError(f"lora_rank must be a whole number of at least 1 (got {self.rank!r})")
        if self.alpha is not None:
            require_positive("lora_alpha", self.alpha, integer=False)
            if not math.isfinite(self.alpha):
                raise LabkitError(f"lora_alpha must be a finite positive number (got {self.alpha!r})")

    def check(self, shape: ModelShape, precision: str) -> Finetune:
        """Refuse what the model cannot take: unknown targets, a rank above a layer's width, QLoRA in fp32."""
        allowed = allowed_targets(shape.gated)
        for t in self.targets:
            if t not in allowed:
                raise LabkitError(f"lora_targets must be names from {', '.join(allowed)} or all-linear "
                                  f"(got {t!r} for {shape.name})")
        widest = min(min(matrix_shapes(shape)[t]) for t in self.targets)
        if self.rank > widest:
            raise LabkitError(f"lora_rank must be at most {widest}, the narrowest width of the targeted layers "
                              f"(got {self.rank})")
        if self.method == "qlora" and precision != "bf16-mixed":
            raise LabkitError(f"precision must be bf16-mixed with finetune qlora (got {precision!r}): the 4-bit "
                              "base is dequantized to 16 bits to compute, and QLoRA's recipe trains in bf16")
        return self


def adapter_tensors(shape: ModelShape, ft: Finetune) -> tuple[int, ...]:
    """Element counts of the adapters in the optimizer's order: per layer, per target, A (r x in) then B (out x r)."""
    mats = matrix_shapes(shape)
    one = [n for t in ft.targets for n in (ft.rank * mats[t][0], mats[t][1] * ft.rank)]
    return tuple(one * shape.layers)


def nf4_bytes(n: int, double_quant: bool = False) -> int:
    """Bytes of one matrix of ``n`` weights in NF4: packed codes and the blocks' scales (QLoRA section 3)."""
    blocks = math.ceil(n / BLOCK)
    if double_quant:
        return math.ceil(n / 2) + blocks + 4 * math.ceil(blocks / SCALE_BLOCK) + 4
    return math.ceil(n / 2) + 4 * blocks


def frozen_bytes(shape: ModelShape, ft: Finetune, precision: str) -> int:
    """The frozen base: every parameter at the weights' precision, the layers' matrices in NF4 under QLoRA."""
    w = 4 if precision == "fp32" else 2
    if ft.method == "lora":
        return w * shape.params
    mats = matrix_shapes(shape).values()
    quantized = sum(nf4_bytes(i * o, ft.double_quant) for i, o in mats) * shape.layers
    return quantized + w * (shape.params - sum(i * o for i, o in mats) * shape.layers)


def _norm(shape: ModelShape, e: int, sbh: int, sb: int) -> float:
    """A norm with a frozen weight: LayerNorm keeps input, mean and rstd; RMSNorm its fp32 input and rstd."""
    return e * sbh + 2 * e * sb if shape.norm == "layernorm" else 4 * sbh + 4 * sb


def _attention(shape: ModelShape, e: int, s: int, b: int) -> float:
    """sdpa's flash kernel on the CPU: Q, K, V, output and an fp32 log-sum-exp per row (activation_options)."""
    sbh, kv = s * b * shape.hidden, shape.kv_hidden / shape.hidden
    return e * sbh * (2 + 2 * kv) + 4 * shape.heads * s * b


def layer_terms(shape: ModelShape, ft: Finetune, seq: int, batch: int, e: int, grad_in: bool = True
                ) -> list[ActivationTerm]:
    """What one frozen layer with adapters keeps for backward; ``grad_in``: its input needs a gradient
    (False in the first layer, whose input is the frozen embedding's output)."""
    s, b, h, f, r = seq, batch, shape.hidden, shape.ffn_size, ft.rank
    sbh, sb = s * b * h, s * b
    t = set(ft.targets)
    attn_in = t & {"q", "k", "v", "qkv"}
    mlp_in = t & {"gate", "up"}
    stations: list[tuple[str, str, float, bool]] = [  # (role, what, bytes, is an adapter's input)
        ("norm 1", f"{shape.norm} input and statistics (frozen weight)", _norm(shape, e, sbh, sb), False),
        ("attention input", f"input of the {'/'.join(sorted(attn_in))} adapters", e * sbh, bool(attn_in)),
        ("attention", "Q, K, V, output (flash kernel), log-sum-exp (fp32)", _attention(shape, e, s, b), False),
        ("output input", "input of the o adapter", e * sbh, "o" in t),
        ("norm 2", f"{shape.norm} input and statistics (frozen weight)", _norm(shape, e, sbh, sb), False),
        ("mlp input", f"input of the {'/'.join(sorted(mlp_in))} adapters", e * sbh, bool(mlp_in)),
        ("mlp activation", "what the activation keeps", e * s * b * f * (3 if shape.gated else 4), False),
        ("down input", "input of the down adapter", e * s * b * f, "down" in t),
    ]
    out, on = [], grad_in
    for role, what, nbytes, adapter in stations:
        on = on or adapter
        if not on or (role.endswith("input") and not adapter):
            continue
        if role == "output input" and any(x.role == "attention" for x in out):
            continue  # the o adapter reads sdpa's output, a view of what sdpa already keeps
        out.append(ActivationTerm(role, what, nbytes))
    out.append(ActivationTerm("adapter intermediates", f"A x, r = {r} wide, one per adapter",
                              e * sb * r * len(ft.targets)))
    return out


def rotary_savers(shape: ModelShape, ft: Finetune) -> tuple[int, ...]:
    """The layers whose Q or K needs a gradient, so that rotary's cos and sin are kept: every layer after the
    first, and the first when Q or K has an adapter (none for GPT-2, or under checkpointing, which keeps them
    as the layer's inputs, not as saved tensors). Saved by two or more, they belong to no layer."""
    if not shape.gated or ft.checkpointing:
        return ()
    return tuple(i for i in range(shape.layers) if i > 0 or set(ft.targets) & {"q", "k"})


def _rotary_bytes(shape: ModelShape, seq: int, e: int) -> int:
    return 2 * seq * (shape.hidden // shape.heads) * e


def outside_terms(shape: ModelShape, ft: Finetune, seq: int, batch: int, e: int) -> list[ActivationTerm]:
    """The rotary tables (when two or more layers keep them), the final norm and the loss."""
    s, b = seq, batch
    terms = []
    if len(rotary_savers(shape, ft)) > 1:
        terms.append(ActivationTerm("rotary tables", "cos and sin, one row", _rotary_bytes(shape, s, e)))
    sbh = s * b * shape.hidden
    terms += [ActivationTerm("final norm", f"{shape.norm}, frozen weight", _norm(shape, e, sbh, s * b)),
              ActivationTerm("loss", "fp32 log-probabilities, int64 shifted labels, a scalar",
                             4 * s * b * shape.vocab + 8 * s * b + (8 if b == 1 else 0) + 4)]
    return terms


@dataclass(frozen=True)
class FinetuneBytes:
    """The predicted bytes of one fine-tuning step, by category."""

    frozen: int
    adapters: int
    gradients: int
    optimizer: int  # AdamW's moments, and the fp32 master copies in bf16-mixed (0 on the device when paged)
    per_layer: tuple[float, ...]
    outside: float
    adapter_params: int

    @property
    def activations(self) -> float:
        return sum(self.per_layer) + self.outside


def layer_bytes(shape: ModelShape, ft: Finetune, seq: int, batch: int, e: int) -> tuple[float, ...]:
    """Saved bytes of each layer: the first has no gradient coming in; checkpointing keeps each layer's input."""
    if ft.checkpointing:
        return (float(e * seq * batch * shape.hidden),) * shape.layers
    first = sum(t.bytes for t in layer_terms(shape, ft, seq, batch, e, grad_in=False))
    rest = sum(t.bytes for t in layer_terms(shape, ft, seq, batch, e))
    out = [first] + [rest] * (shape.layers - 1)
    savers = rotary_savers(shape, ft)
    if len(savers) == 1:  # kept by one layer alone: the recorder files it under that layer
        out[savers[0]] += _rotary_bytes(shape, seq, e)
    return tuple(out)


def finetune_bytes(shape: ModelShape, ft: Finetune, seq: int, batch: int, precision: str) -> FinetuneBytes:
    """Every category of one LoRA/QLoRA step of ``shape`` at (batch, seq), at ``precision`` (fp32 or bf16-mixed)."""
    require_choice("precision", precision, ("fp32", "bf16-mixed"))
    require_positive("seq", seq)
    require_positive("batch", batch)
    ft.check(shape, precision)
    n = sum(adapter_tensors(shape, ft))
    w = 4 if precision == "fp32" else 2
    states = 8 * n + (4 * n if precision == "bf16-mixed" else 0)
    outside = sum(t.bytes for t in outside_terms(shape, ft, seq, batch, w))
    return FinetuneBytes(frozen_bytes(shape, ft, precision), w * n, w * n, 0 if ft.paged else states,
                         layer_bytes(shape, ft, seq, batch, w), outside, n)
