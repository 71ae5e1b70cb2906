"""The ``StepShape`` of a step, from what labkit knows of its model: a config file's model, or a shape and setup.

Two sources of activations, as in the rest of the lab: ``labkit.predict.activation_options`` for a
transformers model under named implementation choices (exact on the CPU, ``tests/test_measure_models.py``),
and Korthikanti et al.'s per-layer terms (``labkit.predict.estimate``) for a ``TrainingSetup`` of a preset
or the tiny GPT. Parameter tensors come from ``labkit.shapes.tensors``.
"""

from __future__ import annotations

from labkit.errors import LabkitError
from labkit.predict.activation_options import ActivationOptions, activation_bytes_hf, outside_terms_hf
from labkit.predict.estimate import TrainingSetup, activation_bytes_outside_layers, activation_bytes_per_layer
from labkit.predict.step_peak import StepShape
from labkit.shapes.hf_config import HFModel
from labkit.shapes.tensors import parameter_tensors

HEAD_ROLES = ("final norm", "output layer input", "loss")  # outside terms the output layer and the loss keep


def hf_step_shape(spec: HFModel, batch: int, seq: int, precision: str = "fp32", attention: str = "sdpa",
                  cache: bool | None = None, dropout: float | None = None, device: str = "cpu",
                  optimizer: str = "lab", cuda_major: int = 9) -> StepShape:
    """A transformers model of ``spec`` trained on one (batch, seq) batch of ids that are also its labels."""
    if precision == "bf16-autocast":
        raise LabkitError("precision must be fp32 or bf16-mixed for a predicted peak (got 'bf16-autocast': "
                          "autocast keeps fp32 and bf16 copies the activation options do not name)")
    e = 4 if precision == "fp32" else 2
    mask = 1 if device == "cuda" else None
    opt = ActivationOptions.for_model(spec, attention, cache=cache, act_bytes=e, mask_bytes=mask, dropout=dropout)
    per_layer, outside = activation_bytes_hf(spec.shape, seq, batch, opt, e)
    head = sum(t.bytes for t in outside_terms_hf(spec.shape, seq, batch, opt, e) if t.role in HEAD_ROLES)
    sh = spec.shape
    return StepShape(parameter_tensors(sh), per_layer, sh.layers, outside, head, batch, seq, sh.hidden, sh.ffn_size,
                     sh.vocab, precision, optimizer, device, cuda_major, 8 * batch * seq, sh.vocab * sh.hidden,
                     sh.params_per_layer, mlp_grads=2 if sh.gated or opt.activation == "gelu_new" else 1)


def setup_step_shape(setup: TrainingSetup, device: str = "cuda", optimizer: str = "lab",
                     cuda_major: int = 9, shifted_labels: bool = True) -> StepShape:
    """A preset's or the tiny GPT's step on one device (Korthikanti et al.'s activations); tp = pp = 1, no ZeRO."""
    if setup.tp * setup.pp != 1 or setup.zero_stage:
        raise LabkitError(f"layout must be tp = pp = 1 without ZeRO for a predicted whole-step peak (got tp="
                          f"{setup.tp}, pp={setup.pp}, zero_stage={setup.zero_stage})")
    sh, s, b = setup.shape, setup.seq_len, setup.micro_batch
    e = 4 if setup.precision == "fp32" else 2
    per_layer = activation_bytes_per_layer(sh, s, b, e, setup.mask_bytes, recompute=setup.recompute,
                                           attention=setup.attention)
    outside = activation_bytes_outside_layers(sh, s, b, e, setup.mask_bytes)
    head = 2 * e * s * b * sh.hidden + 4 * s * b * sh.vocab
    precision = "bf16-mixed" if setup.precision != "fp32" else "fp32"
    return StepShape(parameter_tensors(sh), per_layer, sh.layers, outside, head, b, s, sh.hidden, sh.ffn_size,
                     sh.vocab, precision, optimizer, device, cuda_major, 16 * b * s, sh.vocab * sh.hidden,
                     sh.params_per_layer, shifted_labels, 2 if sh.gated else 1)
