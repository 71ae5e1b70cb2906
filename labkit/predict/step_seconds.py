"""One device's training step in seconds, from the advisor's kernel model: forward, backward and AdamW.

Forward and backward are ``labkit.predict.compute.stage_seconds`` on one device (no tensor or pipeline
parallelism): every GEMM, the attention (FlashAttention's rate for ``fused``, the written-out products and
softmax for ``explicit``), the element-wise kernels and ``KERNELS_PER_LAYER`` launches a layer. The
optimizer step is memory-bound AdamW (``labkit.predict.offload_model``: its reads and writes per
parameter at the device's bandwidth), or a measured seconds per parameter when a calibration gives one.
The device is the catalogue's (the datasheet) or a calibrated one (``labkit.hardware.calibration``).
"""

from __future__ import annotations

from labkit.hardware.types import Device
from labkit.predict.compute import KERNELS_PER_LAYER, LAUNCH_S, stage_seconds, stream_seconds
from labkit.predict.offload_model import ZERO3
from labkit.shapes import ModelShape


def step_seconds(shape: ModelShape, seq: int, batch: int, device: Device, dtype: str = "bf16",
                 attention: str = "fused", launch_s: float = LAUNCH_S,
                 adamw_s_per_param: float | None = None) -> dict[str, float]:
    """Seconds of forward, backward and the optimizer step of one micro-batch on ``device``, and their sum."""
    st = stage_seconds(shape, seq, batch, 1, 1, device, dtype, flash=attention == "fused",
                       launch_s=KERNELS_PER_LAYER * launch_s)
    if adamw_s_per_param is None:
        optimizer = stream_seconds(ZERO3.step_bytes_per_param() * shape.params, device)
    else:
        optimizer = adamw_s_per_param * shape.params
    out = {"forward": st["forward"], "backward": st["backward"], "optimizer": optimizer}
    return out | {"total": sum(out.values())}
