"""The in-step moments both peak models share (``labkit.predict.step_peak`` for training, ``finetune_peak``
for LoRA/QLoRA): the transients alive inside a layer's forward and backward beside what autograd saves.

Each figure is read off transformers' modules op by op, and checked on whole steps measured under fake
tensors (``labkit.measure.fake_full``, ``tests/test_fake_property.py``):

* transformers' model loops keep the embeddings' outputs alive while the layers run (``GPT2Model.forward``
  binds ``inputs_embeds`` and ``position_embeds``, ``LlamaModel.forward`` its ``inputs_embeds``), and the
  caller of a layer keeps that layer's input bound until it returns;
* at the MLP's down projection (the forward's worst in-layer moment without recompute): the attention's
  output and the second norm's output (unless an up/gate adapter saves it), the activation's product
  (unless the down adapter saves it) and the projection's output (a LoRA'd projection: the base's and
  ``lora_B``'s outputs and their sum);
* under recompute nothing inside a layer is saved, so the forward's in-layer moment is the layer's own
  working set: GPT-2's gelu_new chain (its input and three temporaries, ``x**3``, ``0.044715 x**3``,
  ``x + ...``) beside the residual and the norm's output; SwiGLU's ``silu(gate) * up`` (three b*s*f), or
  the attention's Q, K, V, their rotated copies and the kernel's output and its reshaped copy;
* transformers' Python RMSNorm: ``x.float()``, its mean square, ``x * rsqrt``, its cast and the weight's
  product (``rmsnorm_forward_transients``), and its backward (``rmsnorm_backward_transients``).
"""

from __future__ import annotations

from dataclasses import dataclass

from labkit.shapes import ModelShape


@dataclass(frozen=True)
class PeakTerm:
    """One named quantity alive at a moment of the step (bytes), and why it is there."""

    name: str
    bytes: float
    why: str


def embeddings_held(shape: ModelShape, batch: int, seq: int, e: int) -> int:
    """The embeddings' outputs the model's forward keeps bound while its layers run (token, and GPT-2's
    position embedding, one row broadcast over the batch)."""
    return e * batch * seq * shape.hidden + (0 if shape.gated else e * seq * shape.hidden)


def mlp_forward_transients(shape: ModelShape, batch: int, seq: int, e: int, targets: tuple[str, ...] = (),
                           first_input_held: bool = False, decoding: bool = False) -> PeakTerm:
    """Temporaries at the last layer's down projection, without recompute (see the module docstring).
    ``first_input_held``: the layer's input is a temporary its caller keeps (a one-layer model, whose only
    layer's input needs no gradient, so nothing saves it); ``decoding``: QLoRA's moment, the down projection's
    NF4 weight being decoded, its outputs not yet made (the activation's product still a temporary)."""
    bsh, bsf = e * batch * seq * shape.hidden, e * batch * seq * shape.ffn_size
    t = set(targets)
    mid = (0 if shape.gated else bsh) + (0 if t & {"gate", "up"} else bsh)  # GPT-2's attention output; norm 2's
    out = bsf * (0 if "down" in t else 1) + (0 if decoding else bsh * (3 if "down" in t else 1))
    held = embeddings_held(shape, batch, seq, e) + (bsh if first_input_held and not shape.gated else 0)
    return PeakTerm("MLP transients", held + mid + out,
                    "the embeddings the model's forward keeps, the attention's and the second norm's outputs, the "
                    "activation's product and the down projection's output (a LoRA'd one: base, lora_B and sum)")


def recompute_forward_transients(shape: ModelShape, batch: int, seq: int, e: int) -> PeakTerm:
    """A layer's own working set when nothing inside it is saved (gradient checkpointing's forward)."""
    b, s, h, f, kv = batch, seq, shape.hidden, shape.ffn_size, shape.kv_hidden
    bsh = e * b * s * h
    held = embeddings_held(shape, b, s, e)
    if not shape.gated:
        return PeakTerm("layer transients", held + 3 * bsh + 4 * e * b * s * f,
                        "the attention's output, the residual, norm 2's output, gelu_new's input and three "
                        "temporaries of its tanh formula")
    rotary = 2 * e * s * (h // shape.heads)
    attention = e * b * s * (5 * h + 3 * kv)
    mlp = 2 * bsh + 3 * e * b * s * f
    return PeakTerm("layer transients", rotary + max(attention, mlp),
                    "rotary's cos and sin, and the larger of the attention's (norm output, Q, K, V, rotated Q and "
                    "K, the kernel's output and its reshape) and SwiGLU's (residual, norm output, silu(gate), up, "
                    "their product)")


def rmsnorm_forward_transients(bsh: int, bs: int, e: int) -> PeakTerm:
    """The final RMSNorm's forward: ``x * rsqrt(mean(x**2))`` in fp32, its cast to ``e`` bytes (a no-op in
    fp32) and the weight's product, with the fp32 mean square beside them."""
    return PeakTerm("RMSNorm forward transients", 4 * bsh + e * bsh * (1 if e == 4 else 2) + 4 * bs,
                    "fp32 normalised input, its cast and the weight's product, the mean square")


def mlp_backward_transients(bsf_bytes: float, weight_grad: float = 0.0, activation_grads: int = 2) -> PeakTerm:
    """The MLP's backward at its activation (both step models use it): the down projection's input gradient
    and the ``activation_grads`` gradients the activation's backward makes before it frees one, beside
    ``weight_grad``, the down projection's weight gradient when the weights train. A frozen LoRA base keeps
    the down projection's saved input to the end of the layer: 2 there (SwiGLU: both inputs of its product;
    gelu_new: its tanh chain), measured op by op on fake and real steps (``tests/test_fake_property.py``);
    full training frees that input first, which ``step_peak``'s ``mlp_grads - 1`` counts."""
    return PeakTerm("MLP backward transients", weight_grad + (1 + activation_grads) * bsf_bytes,
                    "the down projection's input gradient and the gradients through its activation (SwiGLU: both "
                    "inputs of its product; gelu_new: its tanh formula's chain)")


def rmsnorm_backward_transients(bsh: int, act_bytes: int, frozen_head: bool = False) -> PeakTerm:
    """transformers' Python RMSNorm backward: in 16-bit runs the fp32 upcast gradient and the gradients through
    ``x.pow(2).mean()`` (its mean's and three of the pow's), five fp32 b*s*h tensors at its worst; three in fp32
    runs of full training, where the upcast is a no-op and the output layer's weight gradient is alive beside them,
    five again under a frozen head (LoRA). Measured op by op (``tests/test_fake_property.py``); why full fp32
    training holds two fewer is not traced."""
    return PeakTerm("RMSNorm backward transients", (5 if act_bytes != 4 or frozen_head else 3) * 4 * bsh,
                    "fp32 gradients through the norm's upcast, mean and pow")
