"""One GPU's whole-step peak under tensor, pipeline, context and ZeRO parallelism: what fit verdicts judge.

``labkit.predict.step_peak`` predicts one unsharded step to the byte. A sharded step keeps the same
moments, with each term divided as the layout divides it (Shoeybi et al. 2019 for tp; Narayanan et
al. 2021 for pp; Rajbhandari et al., SC 2020 for ZeRO; Megatron-Core's context parallelism for cp):

* **model states per GPU** after sharding (the memory model's parameters, gradients and optimizer
  states: ``labkit.predict.estimate``), alive at every moment;
* **activations per GPU** (the memory model's, per stage and divided by cp);
* **forward's end** on the last stage: the logits ``e*b*(s/cp)*V/tp`` (Megatron's vocab-parallel
  output layer splits V over tp) and their fp32 upcast when they are 16-bit;
* **backward at the loss**: the two fp32 ``b*(s/cp)*V/tp`` gradients of the cross-entropy
  (``step_peak``'s, split the same way);
* **backward in the layers**: the largest layer's transients, one MLP weight's gradient
  ``w*h*f/tp`` and ``mlp_grads`` ``e*b*(s/cp)*f/tp`` gradients, and the flowing gradient
  ``e*b*(s/cp)*h`` (split over tp under sequence parallelism);
* **the optimizer step**: the implementation's temporaries over this GPU's shard (fused: none;
  the lab's single-tensor AdamW: its fp32 gradient copies under bf16-mixed and the largest tensor's
  ``denom``; foreach: one fp32 tensor per parameter), ``step_peak.adamw_temporaries``' rule;
* **cuBLAS's workspaces** on CUDA (``step_peak.cublas_workspace_bytes``).

A bound, stated: with pp > 1 the loss's terms (last stage) are added to the first stage's
activations (the most any stage holds under 1F1B), and the layers' moment keeps every activation
beside the transients. The caching allocator's reserve stays a separate margin
(``labkit.predict.allocator``). Torch-free.
"""

from __future__ import annotations

from dataclasses import dataclass

from labkit.errors import require_choice, require_positive
from labkit.predict.bytes_per_param import FP32, GRAD32
from labkit.predict.step_peak import OPTIMIZERS, PeakTerm, StepPeak, cublas_workspace_bytes
from labkit.shapes import ModelShape


@dataclass(frozen=True)
class ShardedStep:
    """One GPU's share of a sharded step: its states' bytes, its activations, and how the layout splits it."""

    shape: ModelShape
    micro_batch: int
    seq: int
    parameters: float  # bytes per GPU after sharding
    gradients: float
    optimizer_states: float  # master weights and moments
    activations: float  # bytes per GPU (its stage, its share of the sequence)
    tp: int = 1
    pp: int = 1
    cp: int = 1
    sp: bool = False
    precision: str = "bf16-mixed"  # "fp32" or a 16-bit mixed precision
    optimizer: str = "fused"  # OPTIMIZERS: the AdamW implementation whose temporaries the step holds
    shard_params: float = 0.0  # parameters this GPU's optimizer updates (for the temporaries)
    device: str = "cuda"
    cuda_major: int = 9

    def __post_init__(self) -> None:
        require_choice("optimizer", self.optimizer, OPTIMIZERS)
        for name in ("micro_batch", "seq", "tp", "pp", "cp"):
            require_positive(name, getattr(self, name))


def _moments(s: ShardedStep) -> dict[str, tuple[PeakTerm, ...]]:
    sh, e = s.shape, FP32 if s.precision == "fp32" else 2
    w = e  # weights and gradients: 16-bit under mixed precision, fp32 otherwise
    rows = s.micro_batch * s.seq / s.cp
    bsv = rows * sh.vocab / s.tp
    states = [PeakTerm("parameters", s.parameters, "per GPU after sharding"),
              PeakTerm("gradients", s.gradients, "per GPU after sharding"),
              PeakTerm("optimizer states", s.optimizer_states, "master weights and moments per GPU after sharding"),
              PeakTerm("activations", s.activations, "per GPU: its stage, its share of the sequence")]
    if s.device == "cuda":
        states.append(PeakTerm("cuBLAS workspaces", 2 * cublas_workspace_bytes(s.cuda_major),
                               "one per thread's handle, CublasHandlePool.cpp"))
    forward = [*states, PeakTerm("logits", e * bsv, "the last stage's vocab-parallel output, split over tp")]
    if e != FP32:
        forward.append(PeakTerm("fp32 logits", FP32 * bsv, "logits.float() before log_softmax"))
    at_loss = (*states, PeakTerm("log-probabilities' gradient", FP32 * bsv, "nll_loss_backward's fp32 output"),
               PeakTerm("logits' fp32 gradient", FP32 * bsv, "_log_softmax_backward_data's output"))
    grads = 2 if sh.gated else 1
    in_layers = (*states, PeakTerm("flowing gradient", e * rows * sh.hidden / (s.tp if s.sp else 1),
                                   "the gradient of the layer's output"),
                 PeakTerm("MLP backward transients", (w * sh.hidden + grads * e * rows) * sh.ffn_size / s.tp,
                          "one MLP weight's gradient and the gradients through its activation, split over tp"))
    n = s.shard_params
    temps = 0.0
    if s.optimizer != "fused" and n:
        largest = max(sh.hidden * sh.ffn_size, sh.vocab * sh.hidden) / s.tp  # an MLP matrix or the embedding
        temps = FP32 * (n if s.optimizer == "foreach" else 3 * min(largest, n))
        if s.precision != "fp32" and s.optimizer == "lab":
            temps += GRAD32 * n
    optimizer = (*states[:3], *states[4:], PeakTerm("optimizer temporaries", temps,
                                                    f"{s.optimizer} AdamW over this GPU's {n:,.0f} parameters"))
    backward = max((at_loss, in_layers), key=lambda t: sum(x.bytes for x in t))
    return {"forward": tuple(forward), "backward": backward, "optimizer": optimizer}


def sharded_peak(s: ShardedStep, reserve_share: float = 0.0) -> StepPeak:
    """The GPU's whole-step peak by phase and term; ``reserve_share`` of it is the allocator's margin."""
    phases = _moments(s)
    peak = max(sum(t.bytes for t in terms) for terms in phases.values())
    reserve = PeakTerm("caching allocator's reserve", reserve_share * peak if s.device == "cuda" else 0.0,
                       "blocks the allocator keeps beyond the peak (CUDA); a margin, not a need")
    return StepPeak(phases, reserve)
