"""16, 18 or 20 bytes per parameter: three published conventions for mixed-precision Adam, measured.

Every planner budgets the model states of mixed-precision Adam per parameter, and they
disagree because they count different gradients:

* ZeRO (Rajbhandari et al., SC 2020, section 3.1): 16-bit weights (2) + 16-bit gradients
  (2) + fp32 master weights, momentum and variance (K = 12) = 16.
* Megatron-LM's distributed-optimizer documentation (bf16 parameters, fp32 gradients)
  and DeepSpeed's ZeRO-3 estimator (``estimate_zero3_model_states_mem_needs``, 18 B per
  parameter over the GPUs, of which 2 stay on the GPU and 16 move to the CPU when the
  optimizer is offloaded): gradients are kept in fp32, so 2 + 4 + 12 = 18. (DeepSpeed's
  ZeRO-2 estimator counts differently again: 4 + 16/N_d in older releases.)
* Megatron-LM's documentation for fp16 parameters with fp16 gradients: the 16-bit
  gradient *and* its fp32 "main gradient" copy, 2 + 2 + 4 + 12 = 20.

The lab's own ``train.MasterWeightAdamW`` holds ZeRO's 16 between steps, but while its
AdamW update runs it also holds the fp32 copy of every gradient it made from the
16-bit one: 20, Megatron's fp16 row. ``measure_update_states`` reads that off a real step; the three
conventions themselves are ``labkit.predict.bytes_per_param.STATE_CONVENTIONS``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from labkit.errors import LabkitError
from labkit.measure import unique_bytes
from labkit.predict.bytes_per_param import StateConvention
from labkit.rig.train import MasterWeightAdamW, Trainer


@dataclass(frozen=True)
class MeasuredStates:
    """Bytes of each model-state tensor kind alive when AdamW's update starts (measured)."""

    params: int  # distinct parameters
    weights16: int
    grads16: int
    grads32: int
    master: int
    moments: int

    def per_param(self, kind: str) -> float:
        return getattr(self, kind) / self.params

    def holds(self, convention: StateConvention) -> float:
        """The measured bytes per parameter of the tensor kinds ``convention`` counts."""
        kinds = ("weights16", "grads16", "grads32", "master", "moments")
        return sum(self.per_param(k) for k in kinds if getattr(convention, k))

    @property
    def at_update(self) -> float:
        """Everything alive at the update, per parameter."""
        return (self.weights16 + self.grads16 + self.grads32 + self.master + self.moments) / self.params


def measure_update_states(trainer: Trainer) -> MeasuredStates:
    """Run one real step of a bf16-mixed trainer and read every state tensor as AdamW's update starts.

    A step-pre hook on the inner ``torch.optim.AdamW`` sees the model's bf16 weights and
    gradients, the fp32 gradients ``MasterWeightAdamW.step`` has just made from them, the
    master weights and the moments (each storage once). A first step is taken if the moments
    do not exist yet. AdamW's own per-tensor scratch (one parameter at a time) is not counted.
    """
    opt = trainer.optimizer
    if not isinstance(opt, MasterWeightAdamW):
        raise LabkitError(f"precision must be 'bf16-mixed' to measure master-weight states "
                          f"(got {trainer.cfg.precision!r})")
    if not opt.inner.state:
        trainer.step()
    seen: dict[str, int] = {}
    model_params = list(trainer.model.parameters())

    def read(optimizer: torch.optim.Optimizer, args, kwargs) -> None:
        moments = [t for s in optimizer.state.values() for t in s.values() if t.dim()]
        seen.update(weights16=unique_bytes(model_params), grads16=unique_bytes(p.grad for p in model_params),
                    grads32=unique_bytes(m.grad for m in opt.master), master=unique_bytes(opt.master),
                    moments=unique_bytes(moments))

    handle = opt.inner.register_step_pre_hook(read)
    try:
        trainer.step()
    finally:
        handle.remove()
    n = sum(p.numel() for p in {p.untyped_storage().data_ptr(): p for p in model_params}.values())
    return MeasuredStates(n, **seen)
