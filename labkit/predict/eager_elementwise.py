"""Element-wise HBM bytes of one eager transformers decoder layer, counted kernel by kernel, forward and backward.

Eager PyTorch runs every element-wise op of a transformers layer as its own kernel, and each reads its inputs
from and writes its output to HBM. This module counts those bytes per token from the layers' own code
(transformers 5.x, ``models/llama/modeling_llama.py``, ``models/qwen2/modeling_qwen2.py``,
``models/gpt2/modeling_gpt2.py``, ``activations.py``, ``integrations/sdpa_attention.py``), the backward from
autograd's formulas (``tools/autograd/derivatives.yaml`` of PyTorch: each op's gradient kernels read the
incoming gradient and the saved inputs they name, and a tensor used twice gets its two gradients added), and
the dtypes from autocast's CUDA op lists (``aten/src/ATen/autocast_mode.cpp``: ``linear``/``addmm`` and
``scaled_dot_product_attention`` cast their inputs to bf16; ``pow``, ``rsqrt`` and ``layer_norm`` run in
fp32; every other op keeps its inputs' promoted dtype). GEMMs and the attention kernel are not counted here
(``compute.layer_times`` prices them); nor are views (``view``, ``transpose``, ``split``, slices).

* Llama/Qwen2 (``norm == "rmsnorm"``): two RMSNorms (a cast to fp32 unless the input is fp32, ``pow(2)``,
  ``mean``, ``+ eps`` and ``rsqrt`` per row, the multiply, the cast back, the weight multiply), rotary
  embedding on q and k (``q * cos``, ``rotate_half``'s ``neg`` and ``cat``, ``* sin``, the add; cos and sin in
  the dtype of the layer input), the casts autocast puts before each projection and before sdpa where their
  inputs are fp32, the two residual adds, SiLU and the gate product; sdpa runs grouped-query attention
  itself (``enable_gqa``: no ``repeat_kv`` copy without a mask); the backward's copies of q's and k's
  gradients into the projections' layout (the view after ``transpose``).
* GPT-2 (``norm == "layernorm"``): two ``native_layer_norm`` kernels (fp32 under CUDA autocast; the CUDA
  backward reads the gradient and the input a second time for the weight and bias gradients:
  ``layer_norm_kernel.cu``'s separate gamma/beta kernel), Conv1D as ``addmm`` with the bias inside (its
  gradient a row sum), ``gelu_new``'s eight separate ops on b s f (``pow`` in fp32 under CUDA autocast, so
  the rest of the chain and the cast before ``c_proj`` are fp32), the split's ``cat`` in the backward, the
  residual adds and, in training with ``resid_pdrop`` > 0, two ``native_dropout`` kernels (CUDA: one fused
  kernel writing a 1-byte mask; its backward reads the gradient and the mask).

``Precision`` states how the run holds its tensors. ``cuda=False`` gives CPU autocast's lists (no fp32
``pow``) and layer norm's one-kernel backward: what ``tests/test_eager_elementwise.py`` measures against
torch's dispatcher on the CPU.
"""

from __future__ import annotations

from dataclasses import dataclass

from labkit.shapes import ModelShape

A = 2  # bytes of a bf16 activation (the GEMMs' outputs under autocast or in a bf16 model)
F32 = 4
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


@dataclass(frozen=True)
class Precision:
    """How an eager run holds a layer's tensors: the parameters' dtype as built (``weights`` in bytes, or 0 for
    the shape's own ``dtype``), autocast bf16 on or off, dropout on where the model has it, CUDA's kernels."""

    weights: int = 0
    autocast: bool = True
    dropout: bool = True
    cuda: bool = True

    def weight_bytes(self, shape: ModelShape) -> int:
        return self.weights or DTYPE_BYTES.get(shape.dtype, 4)


@dataclass(frozen=True)
class LayerBytes:
    """Bytes per token of one layer's element-wise kernels."""

    forward: float
    backward: float

    @property
    def total(self) -> float:
        return self.forward + self.backward

    def __add__(self, other: LayerBytes) -> LayerBytes:
        return LayerBytes(self.forward + other.forward, self.backward + other.backward)


def rmsnorm(w: float, r: int) -> LayerBytes:
    """``LlamaRMSNorm`` over width ``w`` of an ``r``-byte input with ``r``-byte weights. Forward: the fp32 cast
    (none for fp32 input), pow 8w, mean 4w + 4, ``+ eps`` and rsqrt 8 + 8 per row, multiply 8w + 4, the cast
    back, the weight multiply 2rw. Backward (derivatives.yaml): the weight multiply's two gradients (g * w,
    g * x with its row sum: 2rw + 3rw + rw), the cast, the multiply's (g * x then its row sum for rsqrt's
    input, g * rsqrt: 12w + 8w + 4 + 4w + 4), rsqrt's ``-0.5 g y^3`` per row (28), mean's expand / w (4 + 4w),
    pow's ``g * 2 * x^1`` (8w + 8w + 12w), the two gradients of x added (12w), the cast back."""
    casts = 2 * (r + F32) * w if r != F32 else 0.0
    return LayerBytes(20 * w + 24 + casts + 2 * r * w, 6 * r * w + casts + 68 * w + 40)


def layernorm(w: float, r: int, autocast: bool, cuda: bool) -> LayerBytes:
    """``native_layer_norm`` over width ``w``: reads x, writes y, mean and rstd (4 + 4 per row); fp32 under
    CUDA autocast (a cast first where x is bf16). Backward: reads g, x, mean, rstd, writes dx; CUDA's separate
    gamma/beta kernel reads g and x again (``layer_norm_kernel.cu``); mean and rstd in fp32 on CUDA."""
    fp32 = autocast and cuda
    ri, o = (F32 if fp32 else r), (F32 if fp32 else r)
    cast = (r + F32) * w if ri != r else 0.0
    again = (o + ri) * w if cuda else 0.0
    stats = 8 if cuda or ri == F32 else 2 * ri  # mean and rstd: fp32 on CUDA, the input's dtype on the CPU
    return LayerBytes(cast + (ri + o) * w + stats, cast + (o + 2 * ri) * w + stats + again)


def consumers(w: float, o: int, n: int, autocast: bool) -> LayerBytes:
    """A ``w``-wide ``o``-byte tensor read by ``n`` projections: autocast casts it to bf16 for each (and each
    gradient back), and its ``n`` gradients are added (n - 1 adds in ``o``)."""
    cast = n * (o + A) * w if autocast and o != A else 0.0
    return LayerBytes(cast, cast + (n - 1) * 3 * o * w)


def residual(w: float, r: int) -> LayerBytes:
    """``residual + branch``: r + A + r bytes per element (the sum in the residual's dtype); the backward casts
    the gradient to the branch's bf16 where they differ, and adds the two gradients of the block's input."""
    return LayerBytes((2 * r + A) * w, ((r + A) * w if r != A else 0.0) + 3 * r * w)


def rotary(w: float, d: int, c: int) -> LayerBytes:
    """``apply_rotary_pos_emb`` on a ``w``-wide bf16 q or k, cos and sin in ``c`` bytes (the layer input's
    dtype), the result in p = max(A, c): q * cos and rotate_half(q) * sin (A w + c d + p w each), ``neg`` of
    one half and ``cat`` (A w + 2 A w), the add (3 p w). Backward: g * sin and g * cos (2 p w + c d each, cast
    to bf16 where p is fp32), neg, two ``slice_backward`` (zeros and a copy of a half: 1.5 A w each), the two
    adds of the rotated and direct gradients (3 A w each)."""
    p = max(A, c)
    cast = 2 * (p + A) * w if p != A else 0.0
    return LayerBytes(5 * A * w + 5 * p * w + 2 * c * d, 4 * p * w + 2 * c * d + cast + 10 * A * w)


def silu_gate(f: float) -> LayerBytes:
    """``act_fn(gate) * up`` in bf16: silu (2 A f), the product (3 A f); backward: the product's two gradients
    and ``silu_backward`` (3 A f each)."""
    return LayerBytes(5 * A * f, 9 * A * f)


def gelu_new(f: float, autocast: bool, cuda: bool) -> LayerBytes:
    """``NewGELUActivation``: 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * pow(x, 3)))) on a bf16 b s f
    tensor, eight kernels; ``pow`` in fp32 under CUDA autocast (a cast first) makes the rest fp32 and adds the
    cast before ``c_proj``. Backward: the outer product's two gradients, tanh_backward, the scalar multiplies,
    pow's ``g * 3 * x^2`` (three kernels), casts back to bf16, x's three gradients added (two adds) and 0.5 g."""
    p = F32 if autocast and cuda else A
    cast = (A + F32) * f if p != A else 0.0
    fwd = 2 * A * f + cast + 2 * p * f + 2 * p * f + (A + 2 * p) * f + 3 * 2 * p * f + (A + 2 * p) * f + cast
    bwd = cast + (3 * p + (2 * p + A)) * f + (p + A) * f * (p != A) + 3 * p * f + 2 * p * f
    bwd += 2 * (p + A) * f * (p != A) + 2 * p * f + 7 * p * f + cast + 2 * 3 * A * f + 2 * A * f
    return LayerBytes(fwd, bwd)


def one_kernel_activation(f: float) -> LayerBytes:
    """A one-kernel activation (gelu, relu, silu without a gate): 2 A f forward, 3 A f backward."""
    return LayerBytes(2 * A * f, 3 * A * f)


def dropout(w: float) -> LayerBytes:
    """CUDA's fused ``native_dropout``: reads x, writes y and a 1-byte mask; backward reads g and the mask."""
    return LayerBytes((2 * A + 1) * w, (2 * A + 1) * w)


def layer_bytes(shape: ModelShape, prec: Precision = Precision(), tp: int = 1, sp: bool = False) -> LayerBytes:
    """Bytes per token of one layer's element-wise kernels on one of ``tp`` GPUs (module text): the b s h
    tensors whole on every rank unless sequence-parallel, the heads' and the MLP's split ``tp`` ways."""
    r = prec.weight_bytes(shape)
    w = shape.hidden / (tp if sp and tp > 1 else 1)
    hq, kv, f = shape.hidden / tp, shape.kv_hidden / tp, shape.ffn_size / tp
    out = residual(w, r) + residual(w, r)
    if shape.norm == "rmsnorm":
        out += rmsnorm(w, r) + rmsnorm(w, r) + consumers(w, r, 3, prec.autocast)
        out += consumers(w, r, 2 if shape.gated else 1, prec.autocast)
        d, c = shape.hidden // shape.heads, r
        out += rotary(hq, d, c) + rotary(kv, d, c)
        p = max(A, c)
        if prec.autocast and p != A:  # sdpa's autocast casts the fp32 rotated q and k to bf16
            out += LayerBytes((p + A) * (hq + kv), (p + A) * (hq + kv))
        out += LayerBytes(0.0, 2 * A * (hq + kv))  # q's and k's gradients copied into the projections' layout
    else:
        ln = layernorm(w, r, prec.autocast, prec.cuda)
        o = F32 if prec.autocast and prec.cuda else r
        out += ln + ln + consumers(w, o, 1, prec.autocast) + consumers(w, o, 1, prec.autocast)
        out += LayerBytes(0.0, 2 * A * (hq + 2 * kv))  # the split's backward: cat of q, k, v gradients
    act = shape.activation or ("silu" if shape.gated else "gelu_new")
    if shape.gated:
        out += silu_gate(f)
    elif act == "gelu_new":
        out += gelu_new(f, prec.autocast, prec.cuda)
    else:
        out += one_kernel_activation(f)
    bias = (hq + 2 * kv + f + 2 * w) if shape.bias else (hq + 2 * kv) if shape.qkv_bias else 0.0
    out += LayerBytes(0.0, A * bias)  # each bias gradient: a row sum of its output's gradient
    if prec.dropout and shape.dropout and shape.norm == "layernorm":  # GPT-2's resid_pdrop, twice a layer
        out += dropout(w) + dropout(w)
    return out


def final_norm_bytes(shape: ModelShape, prec: Precision = Precision()) -> LayerBytes:
    """Bytes per token of the model's final norm (``model.norm``, ``transformer.ln_f``), once after the layers."""
    r = prec.weight_bytes(shape)
    return rmsnorm(shape.hidden, r) if shape.norm == "rmsnorm" else layernorm(shape.hidden, r, prec.autocast,
                                                                               prec.cuda)


def weight_cast_bytes(shape: ModelShape, prec: Precision = Precision(), tp: int = 1) -> float:
    """Bytes of autocast's weight casts in one forward and backward where the weights are fp32: each projection's
    and the output layer's weight read in fp32 and written in bf16 once per forward (autocast caches the cast
    within its region), and its bf16 gradient cast back to fp32 (2 x (4 + 2) bytes a weight); 0 otherwise."""
    if not prec.autocast or prec.weight_bytes(shape) != F32:
        return 0.0
    h, kv, f = shape.hidden, shape.kv_hidden, shape.ffn_size
    linear = h * (h + 2 * kv) + h * h + (3 if shape.gated else 2) * h * f
    return 2 * (F32 + A) * (shape.layers * linear + shape.vocab * h) / tp
