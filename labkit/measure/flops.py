"""FLOPs of a real step, counted by torch's ``FlopCounterMode``, fused attention included.

torch (2.13) counts the GPU's fused attention kernels but has no formula for the CPU's
flash kernel (``aten._scaled_dot_product_flash_attention_for_cpu`` and its backward), so a
CPU run with ``scaled_dot_product_attention`` loses its attention matmuls (0.86-0.88x of the
formula at the lab's sizes). ``register_cpu_flash_formulas`` gives the CPU kernel the formulas
torch uses for the GPU flash kernel: two matmuls forward (Q K^T and P V, 4*b*s^2*h), five
backward, because the flash backward recomputes Q K^T from the saved log-sum-exp instead of
keeping the a*s^2 probabilities (Dao et al., "FlashAttention", NeurIPS 2022, Algorithm 4).
``fused_training_flops`` is Narayanan et al.'s count with that recompute added.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.utils import flop_counter as fc
from torch.utils.flop_counter import FlopCounterMode

from labkit.predict.estimate import training_flops
from labkit.rig.step import StepHooks, forward_backward
from labkit.shapes import ModelShape

_CPU_FLASH = (torch.ops.aten._scaled_dot_product_flash_attention_for_cpu,
              torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward)


def register_cpu_flash_formulas() -> None:
    """Teach ``FlopCounterMode`` the CPU flash kernel (idempotent; torch's own GPU formulas reused)."""
    forward, backward = _CPU_FLASH
    if forward not in fc.flop_registry:
        fc.register_flop_formula(forward, get_raw=True)(fc.sdpa_flop)  # already shape-wrapped
    if backward not in fc.flop_registry:
        fc.register_flop_formula(backward, get_raw=True)(fc.sdpa_backward_flop)


@dataclass(frozen=True)
class StepFlops:
    """Floating-point operations of one step, counted by ``FlopCounterMode``."""

    forward: int
    backward: int

    @property
    def total(self) -> int:
        return self.forward + self.backward


def measure_flops(trainer, step: int = 0) -> StepFlops:
    """FLOPs of the forward and backward pass on batch ``step`` (no optimizer step), fused attention counted."""
    register_cpu_flash_formulas()
    fwd, bwd = FlopCounterMode(display=False), FlopCounterMode(display=False)
    forward_backward(trainer, step, StepHooks(forward=lambda _: fwd, backward=lambda _: bwd))
    trainer.optimizer.zero_grad(set_to_none=True)
    return StepFlops(fwd.get_total_flops(), bwd.get_total_flops())


def fused_training_flops(shape: ModelShape, seq: int, micro_batch: int, attention: str = "explicit") -> float:
    """``estimate.training_flops``, plus the Q K^T a flash backward recomputes (2*b*s^2*h per layer) when fused."""
    extra = shape.layers * 2 * micro_batch * seq * seq * shape.hidden if attention in ("fused", "sdpa") else 0
    return training_flops(shape, seq, micro_batch) + extra
