"""Korthikanti et al.'s per-layer activation accounting, tensor by tensor, named by the module that saves it.

Korthikanti et al., "Reducing Activation Recomputation in Large Transformer Models", 2022, section 4,
count 34*s*b*h + 5*a*s^2*b bytes per layer with 16-bit activations and 1-byte dropout masks. Each term
here is one tensor (group) a layer of ``labkit.rig.model`` keeps, written with the element size e and the
mask size m, so a measured run can be compared term by term (``labkit.measure.compare``) and the sum is
``labkit.predict.estimate.activation_bytes_per_layer`` without parallelism or recompute.
``labkit.predict.activation_options`` writes the same ``ActivationTerm`` for transformers' models.
"""

from __future__ import annotations

from dataclasses import dataclass

from labkit.shapes import ModelShape


@dataclass(frozen=True)
class ActivationTerm:
    """One tensor (group) a layer saves, with the module of labkit.rig.model that saves it."""

    role: str
    what: str
    bytes: float


def activation_terms(
    shape: ModelShape, seq: int, micro_batch: int, act_bytes: int = 2, mask_bytes: int = 1,
    attention: str = "explicit",
) -> list[ActivationTerm]:
    """Korthikanti et al.'s per-layer accounting, tensor by tensor (no parallelism, no recompute).

    Roles are the module names of ``labkit.rig.model.Block``, so a measured run can be
    compared term by term. With e = 2, m = 1 the terms add up to 34*sbh + 5*as^2*b.
    """
    s, b, h, a = seq, micro_batch, shape.hidden, shape.heads
    e, m = act_bytes, (mask_bytes if shape.dropout else 0)
    sbh, f, kv = s * b * h, shape.ffn_size / shape.hidden, shape.kv_hidden / shape.hidden
    terms = [
        ActivationTerm("ln_1", "LayerNorm 1 input", e * sbh),
        ActivationTerm("attn.c_attn", "QKV projection input", e * sbh),
    ]
    if attention == "explicit":
        terms += [
            ActivationTerm("attn.core.qk", "Q and K for Q K^T", e * sbh * (1 + kv)),
            ActivationTerm("attn.core.softmax", "softmax output", e * a * s * s * b),
        ]
        if m:
            terms += [
                ActivationTerm("attn.core.attn_drop", "attention dropout mask", m * a * s * s * b),
                ActivationTerm("attn.core.av", "dropout output and V", e * a * s * s * b + e * sbh * kv),
            ]
        else:
            terms += [ActivationTerm("attn.core.av", "V (softmax output already kept)", e * sbh * kv)]
    else:
        terms += [ActivationTerm("attn.core", "Q, K, V, output and log-sum-exp (fp32)",
                                 e * sbh * (2 + 2 * kv) + 4 * a * s * b)]
    terms += [ActivationTerm("attn.c_proj", "output projection input", e * sbh if attention == "explicit" else 0)]
    if m:
        terms += [ActivationTerm("attn.resid_drop", "attention output dropout mask", m * sbh)]
    terms += [
        ActivationTerm("ln_2", "LayerNorm 2 input", e * sbh),
        ActivationTerm("mlp.c_fc", "first MLP linear input", e * sbh),
        ActivationTerm("mlp.act", "SwiGLU inputs" if shape.gated else "GeLU input",
                       e * sbh * f * (3 if shape.gated else 1)),
        ActivationTerm("mlp.c_proj", "second MLP linear input", e * sbh * f),
    ]
    if m:
        terms += [ActivationTerm("mlp.drop", "MLP dropout mask", m * sbh)]
    return terms
