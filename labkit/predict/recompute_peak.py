"""Full training under full recompute: what a transformers model keeps, and its whole-step peak.

Full recompute here is transformers' ``gradient_checkpointing_enable`` (``torch.utils.checkpoint``,
non-reentrant) around every decoder layer: the layer's forward runs without saving, and in backward it
runs again, one layer at a time (Chen et al., "Training Deep Nets with Sublinear Memory Cost", 2016;
Korthikanti et al. 2022 call it full recompute). What each layer keeps is its input only, ``e*b*s*h``
(``labkit.predict.estimate.activation_bytes_per_layer``'s ``full`` rule); the checkpoint's
``_NoopSaveInputs`` saves it where the lab's saved-tensor recorder sees it. The rotary cos/sin tables,
which each layer saved without recompute, now reach the layers as keyword arguments the checkpoint holds
in its closure, not as saved tensors, so they leave the activations (they stay alive as temporaries).
Outside the layers one term can arrive: GPT-2 hands its layers the explicit causal mask (eager attention:
a (b, 1, s, s) tensor in the model's dtype) as a positional argument, which the checkpoint saves once, shared by
every layer; the Llama family passes its mask by keyword, and sdpa needs none. Else nothing changes.

The peak keeps ``labkit.predict.step_peak``'s moments with these activations, and its in-layer backward
moments hold one layer's activations more: the layer being rebuilt, whose saved tensors are alive when its
MLP's backward starts (``step_peak.backward_in_layers`` is the shared moment, not written twice here). In a
gated model the forward has a moment of its own inside the last layer's MLP, where nothing is saved but the
transients are alive (within a kilobyte on Llama-2-7B's widths); GPT-2's forward moment in a layer is not
modelled (its gelu_new chain), nor the attention core's backward under eager or math attention, whose
s^2 fp32 gradients can be the worst moment with a small vocabulary (GPT-2 widths, vocabulary 512, 1,024
tokens, bf16-mixed: predicted 2.3% low).

Selective recompute (Korthikanti et al.'s: the attention core only) is not offered for a transformers model:
its sdpa kernel keeps no s^2 tensor to drop (a fp32 log-sum-exp per row, the only term the kernel alone keeps),
and wrapping transformers' attention function in a checkpoint would measure a lab-made model, not the one a
user trains. ``labkit.predict.estimate`` keeps the Megatron-style selective rule for preset shapes.
"""

from __future__ import annotations

from dataclasses import replace

from labkit.errors import require_choice
from labkit.predict.step_peak import (
    PeakTerm,
    StepPeak,
    StepShape,
    backward_in_layers,
    state_terms,
    step_peak,
)

RECOMPUTE_HF = ("none", "full")


def checkpointed_activations(hidden: int, batch: int, seq: int, act_bytes: int, outside_terms,
                             positional_mask: bool = False) -> tuple[float, float]:
    """(bytes per layer, bytes outside the layers) under full recompute: each layer's input, and the outside terms
    less the rotary tables (``outside_terms``: ``labkit.predict.activation_options.outside_terms_hf``'s list), plus
    the causal mask when the layers take it positionally (``positional_mask``: GPT-2 with eager attention)."""
    per_layer = float(act_bytes * batch * seq * hidden)
    mask = act_bytes * batch * seq * seq if positional_mask else 0
    return per_layer, float(sum(t.bytes for t in outside_terms if t.role != "rotary tables") + mask)


def _forward_in_last_mlp(s: StepShape, states: list[PeakTerm], rotary: float) -> tuple[PeakTerm, ...]:
    """A gated (SwiGLU) layer's forward under a checkpoint, nothing saved, at its MLP's product: every layer's
    input, the residual and the norm's output, the activation's and the up projection's outputs and their product
    (the gate's output freed), the rotary tables and the int64 position ids. Measured under fake tensors."""
    e, bs = s.act_bytes, s.batch * s.seq
    return (*states, PeakTerm("activations", s.per_layer * s.layers, "every layer's input"),
            PeakTerm("residual and norm output", 2 * e * bs * s.hidden, "the layer's running sum and MLP input"),
            PeakTerm("MLP transients", 3 * e * bs * s.ffn, "silu(gate), up and their product"),
            PeakTerm("rotary tables and positions", rotary + 8 * s.seq, "cos, sin and the int64 position ids"))


def recompute_peak(s: StepShape, rebuilt: float, reserve_share: float = 0.0,
                   rotary: float | None = None) -> StepPeak:
    """``step_peak`` of a checkpointed step ``s`` (``per_layer``: a layer's input), its in-layer backward moments
    holding ``rebuilt`` bytes more: one layer's activations, recomputed (what that layer saves without recompute);
    ``rotary`` (bytes of the cos/sin tables, gated models): the last layer's forward at its MLP is a moment too."""
    base = step_peak(s, reserve_share)
    states = state_terms(s)
    extra = PeakTerm("recomputed layer", rebuilt, "the activations one layer rebuilds in backward")
    moments = [base.phases["backward"], *((*backward_in_layers(s, states, at), extra) for at in (s.layers - 1, 0))]
    backward = max(moments, key=lambda ts: sum(t.bytes for t in ts))
    forward = base.phases["forward"]
    if rotary is not None:
        forward = max(forward, _forward_in_last_mlp(s, states, rotary), key=lambda ts: sum(t.bytes for t in ts))
    phases = {**base.phases, "forward": forward, "backward": backward}
    peak = max(sum(t.bytes for t in ts) for ts in phases.values())
    reserve = replace(base.reserve, bytes=reserve_share * peak if s.device == "cuda" else 0.0)
    return StepPeak(phases, reserve)


def hf_recompute_peak(spec, batch: int, seq: int, precision: str, attention: str = "sdpa", cache: bool | None = None,
                      dropout: float | None = None, device: str = "cpu", cuda_major: int = 9,
                      recompute: str = "full") -> tuple[StepPeak, float, float]:
    """(the peak, bytes per layer, bytes outside) of a transformers model of ``spec`` under ``recompute``."""
    from labkit.predict.activation_options import ActivationOptions, outside_terms_hf
    from labkit.predict.step_inputs import hf_step_shape

    require_choice("recompute", recompute, RECOMPUTE_HF)
    plain = hf_step_shape(spec, batch, seq, precision, attention, cache, dropout, device, "lab", cuda_major)
    if recompute == "none":
        return step_peak(plain), plain.per_layer, plain.outside
    e = plain.act_bytes
    opt = ActivationOptions.for_model(spec, attention, cache=cache, act_bytes=e, mask_bytes=1 if device == "cuda"
                                      else None, dropout=dropout, seq=seq, cuda=device == "cuda")
    terms = outside_terms_hf(spec.shape, seq, batch, opt, e)
    per_layer, outside = checkpointed_activations(spec.shape.hidden, batch, seq, e, terms,
                                                  spec.family == "gpt2" and opt.attention == "eager")
    s = replace(plain, per_layer=per_layer, outside=outside)
    rotary = sum(t.bytes for t in terms if t.role == "rotary tables") if spec.shape.gated else None
    rebuilt = plain.per_layer - shared_input(spec.shape.norm, e) * per_layer
    return recompute_peak(s, rebuilt, rotary=rotary), per_layer, outside


def shared_input(norm: str, act_bytes: int) -> int:
    """1 when a rebuilt layer's first norm saves the layer's input itself, the storage its checkpoint already
    keeps (LayerNorm always; transformers' RMSNorm in fp32, where its upcast is a no-op), else 0 (a 16-bit
    RMSNorm saves its fp32 copy)."""
    return int(norm == "layernorm" or act_bytes == 4)
