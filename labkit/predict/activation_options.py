"""What a transformers model saves for backward, term by term, under named implementation choices.

Korthikanti et al. (2022, section 4) count 34*s*b*h + 5*a*s^2*b bytes per layer for a model
built the way Megatron builds it. The same layer written another way keeps other tensors, and
the differences are not small: GPT-2's ``gelu_new`` is a Python tanh formula that keeps four
s*b*f tensors where ``nn.GELU`` keeps one; Llama's RMSNorm upcasts to fp32 in Python and keeps
the fp32 input, its rstd and the normalised copy; ``use_cache=True`` during training makes GPT-2's
sdpa path copy two of Q, K, V; the CPU's ``F.dropout`` keeps a mask as wide as the activation.
``ActivationOptions`` names each choice; ``activation_terms_hf`` counts what each term keeps
(bytes exact against a measured CPU step, ``tests/test_activation_options.py``):

* ``attention``: ``eager`` keeps Q, K, V (K and V repeated to every head under grouped-query
  attention) and the a*s^2 probabilities (fp32 in the Llama family, plus the cast copy the
  P V matmul keeps in 16-bit runs); ``sdpa`` (CPU flash kernel) keeps Q, K, V unrepeated, the
  output and a fp32 log-sum-exp per row. With attention dropout the CPU's sdpa falls back to
  the math kernel, which keeps what eager keeps, in fp32 for 16-bit inputs (mask included);
* ``activation``: ``gelu`` (and ``gelu_pytorch_tanh``) keep their input, ``gelu_new`` four
  tensors, ``silu`` (SwiGLU) the gate input, its output and the up projection;
* ``norm``: ``layernorm`` (``nn.LayerNorm``) keeps its input, mean and rstd at the element size;
  ``rmsnorm`` (transformers' Python RMSNorm) an fp32 input, an fp32 rstd and the normalised copy;
* ``cache``: ``use_cache`` during training (transformers' default);
* ``mask_bytes``: bytes per dropout-mask element, the element size on the CPU (``F.dropout``),
  1 for CUDA's fused dropout;
* ``window_mask``: sliding-window attention (Mistral's ``sliding_window``, Qwen2's ``use_sliding_window``)
  once the sequence reaches the window: transformers then hands sdpa an explicit (b, 1, s, s) mask in the
  model's dtype, which the kernel saves, and repeats K and V to every head (grouped-query attention
  is left to sdpa only without a mask). Measured on the CPU (``tests/test_sliding_window.py``) and on the
  H200 (Mistral-7B at 4,096 tokens: 2 s^2 bytes of mask and 3/4 of K and V repeated, +10% a layer);
* ``cuda``: CUDA's sdpa kernels save the dropout generator's seed and offset, two int64 scalars a layer.

At micro-batch 1 the reshape before a batched matmul can be a view instead of a copy; in GPT-2 a
saved Q or K then keeps the whole fused QKV output alive (+2 e*s*b*h), which happens with eager
attention and the cache on, or the math fallback and the cache off (the cache copies two of Q, K, V
first, and which ones decides it); not when the math fallback upcasts 16-bit Q, K, V to fp32, whose
copies alias nothing (GPT-3 175B's shape in bf16-mixed, +3% a layer before this was seen). Tested for
GPT-2 at micro-batch 1; for the Llama family at
micro-batch 1 with a single KV head, repeat_kv aliases too, and that case is not claimed.

Outside the layers: position ids (GPT-2), the embedding dropout mask, the final norm, the
output layer's input, rotary cos/sin tables (computed once, used by every layer), and the loss
(fp32 log-probabilities 4*s*b*V, int64 shifted labels, one fp32 scalar).
"""

from __future__ import annotations

from dataclasses import dataclass

from labkit.errors import LabkitError, require_choice
from labkit.predict.activation_terms import ActivationTerm
from labkit.shapes import ModelShape
from labkit.shapes.hf_config import ACTIVATIONS, HFModel

ATTENTION_KERNELS = ("eager", "sdpa")
NORM_KINDS = ("layernorm", "rmsnorm")
ACTIVATION_SAVES = {"gelu": 1, "gelu_new": 4, "silu": 3}  # s*b*f tensors each activation keeps


@dataclass(frozen=True)
class ActivationOptions:
    """The implementation a saved-bytes estimate assumes (see the module docstring for each choice)."""

    attention: str = "sdpa"
    activation: str = "gelu"
    norm: str = "layernorm"
    cache: bool = False
    mask_bytes: int = 0  # 0: no dropout
    attn_dropout: bool = False
    embd_dropout: bool = False
    softmax_fp32: bool = False  # the Llama family's eager softmax runs in fp32
    rotary: bool = False
    position_ids: bool = True  # GPT-2's learned positions keep their int64 ids
    window_mask: bool = False  # sliding-window attention at a sequence that reaches the window
    cuda: bool = False

    def __post_init__(self) -> None:
        require_choice("attention", self.attention, ATTENTION_KERNELS)
        require_choice("activation", self.activation, ACTIVATIONS)
        require_choice("norm", self.norm, NORM_KINDS)
        require_choice("mask_bytes", self.mask_bytes, (0, 1, 2, 4))

    @classmethod
    def for_model(cls, spec: HFModel, attention: str = "sdpa", cache: bool | None = None, act_bytes: int = 4,
                  mask_bytes: int | None = None, dropout: float | None = None, seq: int = 0,
                  cuda: bool = False) -> ActivationOptions:
        """The options a transformers model of ``spec`` runs with at ``seq`` tokens; ``mask_bytes`` defaults to
        the CPU's."""
        gpt2 = spec.family == "gpt2"
        drops = (spec.embd_dropout, spec.resid_dropout, spec.attn_dropout) if dropout is None else (dropout,) * 3
        if not gpt2:
            drops = (0.0, 0.0, drops[2])
        any_drop = any(p > 0 for p in drops)
        m = (act_bytes if mask_bytes is None else mask_bytes) if any_drop else 0
        return cls(attention=attention, activation=spec.activation, norm="layernorm" if gpt2 else "rmsnorm",
                    cache=spec.use_cache if cache is None else cache, mask_bytes=m,
                    attn_dropout=drops[2] > 0, embd_dropout=drops[0] > 0, softmax_fp32=not gpt2,
                    rotary=not gpt2, position_ids=gpt2, window_mask=_window(spec, seq), cuda=cuda)


def _window(spec: HFModel, seq: int) -> bool:
    """Whether every layer of ``spec`` attends through a sliding window that ``seq`` tokens reach."""
    cfg, layers = spec.config, spec.shape.layers
    window = cfg.get("sliding_window")
    if spec.family == "qwen2":
        if not cfg.get("use_sliding_window"):
            return False
        first = cfg.get("max_window_layers", layers)
        if 0 < first < layers:
            raise LabkitError(f"config field max_window_layers must be 0 or at least num_hidden_layers with "
                              f"use_sliding_window (got {first} of {layers}): layers with and without the window "
                              "keep different activations, which the per-layer estimate does not model")
        if first >= layers:
            return False
    elif spec.family != "mistral":
        return False
    return isinstance(window, int) and 0 < window <= seq


def _norm(opt: ActivationOptions, e: int, sbh: int, sb: int) -> float:
    return e * sbh + 2 * e * sb if opt.norm == "layernorm" else 4 * sbh + 4 * sb + e * sbh


def activation_terms_hf(shape: ModelShape, seq: int, micro_batch: int, opt: ActivationOptions,
                        act_bytes: int = 4) -> list[ActivationTerm]:
    """Bytes one layer keeps for backward, term by term, under ``opt`` (roles name transformers' parts)."""
    s, b, h, a, e = seq, micro_batch, shape.hidden, shape.heads, act_bytes
    sbh, sb, sbf, kv, m = s * b * h, s * b, s * b * shape.ffn_size, shape.kv_hidden / h, opt.mask_bytes
    ass = a * s * s * b
    eager = opt.attention == "eager" or opt.attn_dropout  # CPU sdpa with dropout runs the math kernel
    math = opt.attention == "sdpa" and opt.attn_dropout  # ... in fp32 for 16-bit inputs, fp32 mask included
    ce, cm = (4, 4) if math and m else (e, m)
    terms = [ActivationTerm("norm 1", f"{opt.norm} input and statistics", _norm(opt, e, sbh, sb)),
             ActivationTerm("qkv input", "Q, K, V projection input", e * sbh)]
    if eager:
        terms += [ActivationTerm("attention", "Q, K, V (K, V repeated to every head)", 3 * ce * sbh),
                  ActivationTerm("softmax", "probabilities" + (" (fp32)" if opt.softmax_fp32 else ""),
                                 (4 if opt.softmax_fp32 else ce) * ass)]
        if opt.attn_dropout:
            terms += [ActivationTerm("attention dropout", "mask and output", (cm + ce) * ass)]
        elif opt.softmax_fp32 and e != 4:
            terms += [ActivationTerm("softmax cast", "16-bit copy of the probabilities P V keeps", e * ass)]
        terms += [ActivationTerm("output input", "output projection input", e * sbh)]
        if b == 1 and not opt.rotary and (opt.cache != math) and ce == e:  # an upcast copy aliases nothing
            terms += [ActivationTerm("fused QKV kept whole", "micro-batch 1: a saved Q or K is a view of the "
                                     "fused QKV output, keeping all three alive", 2 * ce * sbh)]
    else:
        rep = 1.0 if opt.window_mask else kv  # an explicit mask: K and V repeated to every head first
        terms += [ActivationTerm("attention", "Q, K, V, output (flash kernel), log-sum-exp (fp32)",
                                 e * sbh * (2 + 2 * rep) + 4 * a * s * b)]
        if opt.window_mask:
            terms += [ActivationTerm("sliding-window mask", "(b, 1, s, s) in the model's dtype", e * s * s * b)]
        if opt.cuda:
            terms += [ActivationTerm("dropout generator state", "seed and offset, int64 (CUDA)", 16)]
        if opt.cache and not opt.rotary:  # GPT-2's attention; Llama-family caches keep views
            terms += [ActivationTerm("cache copies", "use_cache=True: two of Q, K, V copied (GPT-2)", 2 * e * sbh)]
    if m:
        terms += [ActivationTerm("attention output dropout", "mask", m * sbh)]
    terms += [ActivationTerm("norm 2", f"{opt.norm} input and statistics", _norm(opt, e, sbh, sb)),
              ActivationTerm("mlp input", "first MLP projection input", e * sbh),
              ActivationTerm("mlp activation", f"{opt.activation} keeps", e * sbf * ACTIVATION_SAVES[
                  ACTIVATIONS[opt.activation]]),
              ActivationTerm("mlp output input", "second MLP projection input", e * sbf)]
    if m:
        terms += [ActivationTerm("mlp dropout", "mask", m * sbh)]
    return terms


def outside_terms_hf(shape: ModelShape, seq: int, micro_batch: int, opt: ActivationOptions,
                     act_bytes: int = 4) -> list[ActivationTerm]:
    """What the embedding, the rotary tables, the final norm, the output layer and the loss keep."""
    s, b, h, e = seq, micro_batch, shape.hidden, act_bytes
    sbh = s * b * h
    terms = []
    if opt.position_ids:
        terms += [ActivationTerm("position ids", "int64, one row", 8 * s)]
    if opt.embd_dropout and opt.mask_bytes:
        terms += [ActivationTerm("embedding dropout", "mask", opt.mask_bytes * sbh)]
    if opt.rotary:
        terms += [ActivationTerm("rotary tables", "cos and sin, one row, shared by the layers",
                                 2 * s * (h // shape.heads) * e)]
    terms += [ActivationTerm("final norm", f"{opt.norm} input and statistics", _norm(opt, e, sbh, s * b)),
              ActivationTerm("output layer input", "final norm output", e * sbh),
              ActivationTerm("loss", "fp32 log-probabilities, int64 shifted labels (their padded row whole at "
                             "micro-batch 1, where the shift is a view), a scalar",
                             4 * s * b * shape.vocab + 8 * s * b + (8 if b == 1 else 0) + 4)]
    return terms


def activation_bytes_hf(shape: ModelShape, seq: int, micro_batch: int, opt: ActivationOptions,
                        act_bytes: int = 4) -> tuple[float, float]:
    """(bytes per layer, bytes outside the layers) under ``opt``."""
    return (sum(t.bytes for t in activation_terms_hf(shape, seq, micro_batch, opt, act_bytes)),
            sum(t.bytes for t in outside_terms_hf(shape, seq, micro_batch, opt, act_bytes)))
