"""The ``StepShape`` of a config file's transformers model, from ``labkit.predict.activation_options``.

Its activations are counted under named implementation choices (exact on the CPU,
``tests/test_measure_models.py``); a preset's or the tiny GPT's step, with Korthikanti et al.'s terms,
is built by ``labkit.predict.estimate.step_shape``.
"""

from __future__ import annotations

from labkit.errors import LabkitError
from labkit.predict.activation_options import ActivationOptions, activation_bytes_hf, outside_terms_hf
from labkit.predict.step_peak import StepShape
from labkit.shapes.hf_config import HFModel

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
    opt = ActivationOptions.for_model(spec, attention, cache=cache, act_bytes=e, mask_bytes=mask, dropout=dropout,
                                      seq=seq, cuda=device == "cuda")
    per_layer, outside = activation_bytes_hf(spec.shape, seq, batch, opt, e)
    head = sum(t.bytes for t in outside_terms_hf(spec.shape, seq, batch, opt, e) if t.role in HEAD_ROLES)
    return StepShape.of_model(spec.shape, batch, seq, per_layer, outside, head, precision=precision,
                              optimizer=optimizer, device=device, cuda_major=cuda_major, batch_bytes=8 * batch * seq,
                              mlp_grads=2 if spec.shape.gated or opt.activation == "gelu_new" else 1)
