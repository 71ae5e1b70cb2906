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
MLP's backward starts (``step_peak._backward_in_layers`` is the shared moment, not written twice here).

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
    _backward_in_layers,
    _states,
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


def recompute_peak(s: StepShape, rebuilt: float, reserve_share: float = 0.0) -> StepPeak:
    """``step_peak`` of a checkpointed step ``s`` (``per_layer``: a layer's input), its in-layer backward moments
    holding ``rebuilt`` bytes more: one layer's activations, recomputed (what that layer saves without recompute)."""
    base = step_peak(s, reserve_share)
    states = _states(s)
    extra = PeakTerm("recomputed layer", rebuilt, "the activations one layer rebuilds in backward")
    moments = [base.phases["backward"], *((*_backward_in_layers(s, states, at), extra) for at in (s.layers - 1, 0))]
    backward = max(moments, key=lambda ts: sum(t.bytes for t in ts))
    phases = {**base.phases, "backward": backward}
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
    per_layer, outside = checkpointed_activations(spec.shape.hidden, batch, seq, e,
                                                  outside_terms_hf(spec.shape, seq, batch, opt, e),
                                                  spec.family == "gpt2" and opt.attention == "eager")
    s = replace(plain, per_layer=per_layer, outside=outside)
    return recompute_peak(s, plain.per_layer - shared_input(spec.shape.norm, e) * per_layer), per_layer, outside


def shared_input(norm: str, act_bytes: int) -> int:
    """1 when a rebuilt layer's first norm saves the layer's input itself, the storage its checkpoint already
    keeps (LayerNorm always; transformers' RMSNorm in fp32, where its upcast is a no-op), else 0 (a 16-bit
    RMSNorm saves its fp32 copy)."""
    return int(norm == "layernorm" or act_bytes == 4)
