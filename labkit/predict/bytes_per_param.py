"""Bytes per parameter of every model-state tensor: the one source the lab's accountings read.

Mixed-precision Adam holds, per parameter (Rajbhandari et al., "ZeRO", SC 2020, section 3.1;
Micikevicius et al., "Mixed Precision Training", ICLR 2018): 16-bit weights and gradients (2 bytes
each), fp32 master weights (4) and Adam's fp32 momentum and variance (4 + 4), K = 12. Some
implementations also keep fp32 gradients (4): Megatron-LM's distributed optimizer and DeepSpeed's
estimators count them (18), and an fp32 copy beside the 16-bit gradient makes 20, which is what the
lab's ``MasterWeightAdamW`` holds while it steps. fp32 training keeps 4 + 4 + 8.

``labkit.predict.estimate.PRECISIONS`` (ZeRO's count per precision), ``labkit.predict.conventions``
(ZeRO's and DeepSpeed's planners), ``labkit.predict.offload_model`` (where each term lives),
``labkit.predict.step_peak`` (the optimizer step) and ``labkit.measure.state_conventions`` (the three
published conventions, measured) all read the constants and ``STATE_CONVENTIONS`` below;
``tests/test_bytes_per_param.py`` checks that none of them disagrees.
"""

from __future__ import annotations

from dataclasses import dataclass

WEIGHT16 = 2  # 16-bit (bf16 or fp16) model weights
GRAD16 = 2  # 16-bit gradients on the model
FP32 = 4  # an fp32 element: fp32 weights or gradients, master weights, each Adam moment
MASTER = FP32  # fp32 master weights
MOMENTS = 2 * FP32  # Adam's momentum and variance
GRAD32 = FP32  # fp32 gradients (accumulated in fp32, or an fp32 copy of the 16-bit ones)


@dataclass(frozen=True)
class StateConvention:
    """Bytes per parameter of each model-state tensor under one published convention."""

    name: str
    source: str
    weights16: int  # 16-bit model weights
    grads16: int  # 16-bit gradients on the model
    grads32: int  # fp32 gradients (accumulated in fp32, or an fp32 copy of the 16-bit ones)
    master: int  # fp32 master weights
    moments: int  # Adam's fp32 momentum and variance

    @property
    def bytes_per_param(self) -> int:
        return self.weights16 + self.grads16 + self.grads32 + self.master + self.moments

    @property
    def formula(self) -> str:
        labels = {"weights16": "16-bit w", "grads16": "16-bit g", "grads32": "fp32 g", "master": "fp32 master",
                  "moments": "m, v"}
        return " + ".join(f"{getattr(self, k)} ({label})" for k, label in labels.items() if getattr(self, k))


ZERO = StateConvention("ZeRO", "Rajbhandari et al., SC 2020, section 3.1 (2 + 2 + K, K = 12)",
                       WEIGHT16, GRAD16, 0, MASTER, MOMENTS)
FP32_GRADIENTS = StateConvention(
    "fp32 gradients", "Megatron-LM docs, distributed optimizer (bf16 params, fp32 grads: 18); DeepSpeed "
    "estimate_zero3_model_states_mem_needs (18 B per parameter over the GPUs; with the optimizer offloaded, "
    "2 stay on the GPU and 16 go to the CPU)", WEIGHT16, 0, GRAD32, MASTER, MOMENTS)
FP32_COPY = StateConvention("16-bit gradients + fp32 copy", "Megatron-LM docs, distributed optimizer "
                            "(fp16 params, fp16 grads: 20)", WEIGHT16, GRAD16, GRAD32, MASTER, MOMENTS)
STATE_CONVENTIONS = (ZERO, FP32_GRADIENTS, FP32_COPY)
