"""The ops one eager transformers decoder layer dispatches, forward and backward, counted from its code.

Each op the dispatcher runs that is not a view costs the host one dispatch and the GPU one launch; views and
metadata-only ops (``view``, ``_unsafe_view``, ``t``, ``transpose``, ``slice``, ``unsqueeze``, ``expand``,
``split``, ``detach``, ``alias``: ops whose schema returns an alias of an input, ``OpOverload.is_view``, plus
``_unsafe_view``, a reshape of a fresh tensor) move no data and launch nothing. The counts are read, like
``eager_elementwise``'s bytes, from transformers' layers (``models/llama/modeling_llama.py``,
``models/qwen2/modeling_qwen2.py``, ``models/gpt2/modeling_gpt2.py``, ``activations.py``), autograd's formulas
(PyTorch's ``tools/autograd/derivatives.yaml``) and autocast's op lists (``aten/src/ATen/autocast_mode.cpp``):

* every projection is one GEMM forward (``mm``; ``addmm`` with its bias) and two backward (the input's and the
  weight's gradient), plus a row sum for a bias; Llama/Qwen2 run q, k, v as three projections, GPT-2's
  ``c_attn`` as one; sdpa is one op each way;
* ``LlamaRMSNorm``: pow, mean, ``+ eps``, rsqrt, the multiply and the weight multiply forward, with a cast to
  fp32 and one back unless the input is fp32; backward 14 ops (the two multiplies' gradients with their row
  sums, rsqrt's, mean's and pow's gradients, the two gradients of x added) plus the two casts' gradients;
* rotary embedding on q and on k: ``q * cos``, ``rotate_half``'s ``neg`` and ``cat``, ``* sin``, the add (5);
  backward 7 (the two products' gradients, ``neg``, two ``slice_backward``, two adds); the backward copies q's
  and k's gradients into the projections' layout (two ``clone``);
* ``native_layer_norm`` is one op each way; ``gelu_new`` is 8 ops forward, 11 backward; SiLU and the gate
  product 2 forward, 3 backward; each residual add one op forward and one add of gradients backward;
* autocast (fp32 weights): a cast of every weight and bias a projection reads and of every fp32 input it
  reads, the casts of the fp32 rotated q and k before sdpa, each cast's gradient cast back; a residual add
  of an fp32 stream and a bf16 branch casts the branch's gradient, as do rotary's fp32 products; the
  gradients of a tensor read by several projections added;
* CUDA only (``Precision.cuda``): ``layer_norm`` runs in fp32 under autocast (a cast of a 16-bit input each
  way), ``pow`` too, so ``gelu_new`` adds a cast before it and one before ``c_proj`` (and 5 gradient casts),
  and training dropout (GPT-2's ``resid_pdrop``) is one ``native_dropout`` each way.

``tests/test_eager_ops.py`` checks every count against torch's dispatcher on tiny CPU blocks of two sizes.
"""

from __future__ import annotations

from dataclasses import dataclass

from labkit.predict.eager_elementwise import F32, A, Precision
from labkit.shapes import ModelShape

RMSNORM_FORWARD, RMSNORM_BACKWARD = 6, 14
ROTARY_FORWARD, ROTARY_BACKWARD = 5, 7
GELU_NEW_FORWARD, GELU_NEW_BACKWARD = 8, 11
EAGER = Precision()  # autocast bf16 over the weights as built, dropout where the config has it, CUDA


@dataclass(frozen=True)
class LayerOps:
    """Kernel-launching ops of one layer in one forward and one backward."""

    forward: int
    backward: int

    def __add__(self, other: LayerOps) -> LayerOps:
        return LayerOps(self.forward + other.forward, self.backward + other.backward)


def _same(n: int) -> LayerOps:
    return LayerOps(n, n)


def projections(shape: ModelShape, r: int, autocast: bool) -> LayerOps:
    """The layer's GEMMs (and autocast's weight casts where the weights are fp32): 1 op forward, 2 backward each,
    plus a cast per weight and bias each way; a bias adds its row sum to the backward."""
    fused_qkv = shape.norm == "layernorm"  # GPT-2's Conv1D c_attn
    gemms = (2 if fused_qkv else 4) + (3 if shape.gated else 2)
    biases = gemms if shape.bias else (1 if fused_qkv else 3) if shape.qkv_bias else 0
    casts = gemms + biases if autocast and r == F32 else 0
    return LayerOps(gemms, 2 * gemms + biases) + _same(casts)


def layer_ops(shape: ModelShape, prec: Precision = EAGER) -> LayerOps:
    """Ops of one decoder layer forward and backward (module text), the same at every size of the layer."""
    r, ac = prec.weight_bytes(shape), prec.autocast
    out = projections(shape, r, ac) + LayerOps(1, 1) + LayerOps(2, 2)  # sdpa; the residual adds
    out += LayerOps(0, 2 if r != A else 0)  # each residual's branch gradient cast to bf16
    up = 2 if shape.gated else 1
    if shape.norm == "rmsnorm":
        norm_casts = 2 if r != F32 else 0
        out += LayerOps(2 * (RMSNORM_FORWARD + norm_casts), 2 * (RMSNORM_BACKWARD + norm_casts))
        out += LayerOps(2 * ROTARY_FORWARD, 2 * ROTARY_BACKWARD + 2)  # q and k; the backward's two clones
        consumers, o = 3 + up, r
        if ac and max(A, r) != A:  # fp32 rotated q, k: cast before sdpa; their products' gradients cast
            out += LayerOps(2, 2 + 4)
        adds = 2 + (up - 1)  # q, k, v read one normed tensor; gate and up another
    else:
        ln_cast = 1 if ac and prec.cuda and r != F32 else 0  # layer_norm in fp32 under CUDA autocast
        out += LayerOps(2 * (1 + ln_cast), 2 * (1 + ln_cast)) + LayerOps(0, 1)  # the split's backward: cat
        consumers, o = 1 + 1, (F32 if ac and prec.cuda else r)
        adds = 0
    out += LayerOps(0, adds) + (_same(consumers) if ac and o != A else LayerOps(0, 0))
    act = shape.activation or ("silu" if shape.gated else "gelu_new")
    if shape.gated:
        out += LayerOps(2, 3)
    elif act == "gelu_new":
        out += LayerOps(GELU_NEW_FORWARD, GELU_NEW_BACKWARD)
        if ac and prec.cuda:  # pow in fp32: a cast before it and before c_proj, and their gradients' casts
            out += LayerOps(2, 5)
    else:
        out += LayerOps(1, 1)
    if prec.dropout and prec.cuda and shape.dropout and shape.norm == "layernorm":  # resid_pdrop, twice a layer
        out += _same(2)
    return out


# The host's bare ops (one bare op: calibrate's launch_s, a one-element torch.mul in a Python loop) of one layer's
# forward and backward, by family, weights' bytes and autocast: measured (issue 29, labkit.measure.host_time) on this
# repository's CPU host (torch 2.13, transformers 5.25, one thread) on tiny models (h = 16, 8 tokens: the kernels do
# next to nothing) at 2 and 4 layers, their difference over 2 layers, the median of 7 rounds alternating with the
# bare op; the median of three runs below (each run's forward, backward): TinyLlama's fp32 + autocast 145, 164, 139;
# 161, 177, 143; Qwen2's bf16 + autocast 131, 136, 137; 147, 162, 153; GPT-2's fp32 + autocast + dropout 203, 203,
# 203; 172, 186, 173; the lab's bf16 without autocast or dropout: Llama 144, 130, 138; 154, 143, 149; Qwen2 139,
# 142, 137; 154, 150, 151; GPT-2 139, 136, 146; 126, 125, 128. Real ops cost the host 2-4 bare ops each (module
# calls, autograd, autocast), not one. Taken to carry over to a GPU's host in bare ops, as the whole step of the
# lab's tiny GPT does: 929-993 bare ops here, x the H200's 9.4 us = 8.7-9.3 ms beside its measured 9.39 ms
# (datasets/measurements/h200-gpu-check-2026-12.jsonl); labkit bench re-measures them
HOST_BARE_OPS = {("llama", 4, True): (145.0, 161.0), ("qwen2", 2, True): (136.0, 153.0),
                 ("gpt2", 4, True): (203.0, 173.0), ("llama", 2, False): (138.0, 149.0),
                 ("qwen2", 2, False): (139.0, 151.0), ("gpt2", 2, False): (139.0, 126.0)}


def family(shape: ModelShape) -> str:
    """The transformers family whose layer ``shape`` is, as ``shapes.hf_config`` reads it: GPT-2's layer norm,
    Qwen2's biases on Q, K, V only, else Llama's."""
    return "gpt2" if shape.norm == "layernorm" else "qwen2" if shape.qkv_bias else "llama"


def host_bare_ops(shape: ModelShape, prec: Precision = EAGER) -> tuple[float, float]:
    """The host's bare ops of one layer's forward and backward (``HOST_BARE_OPS``); at a precision not measured,
    the family's measured bare ops per counted op (:func:`layer_ops`, the mean over its precisions) times this
    precision's counted ops."""
    fam, w = family(shape), prec.weight_bytes(shape)
    if (fam, w, prec.autocast) in HOST_BARE_OPS:
        return HOST_BARE_OPS[(fam, w, prec.autocast)]
    rates = [(f / ops.forward, b / ops.backward) for (fm, wb, ac), (f, b) in HOST_BARE_OPS.items() if fm == fam
             for ops in [layer_ops(shape, Precision(wb, ac, dropout=ac))]]
    ops = layer_ops(shape, prec)
    return (ops.forward * sum(r[0] for r in rates) / len(rates), ops.backward * sum(r[1] for r in rates) / len(rates))
