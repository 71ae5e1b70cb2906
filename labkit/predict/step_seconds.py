"""One device's training step in seconds: the advisor's kernel model under a framework profile, and AdamW.

The one step-time model (issue 22): forward and backward are ``labkit.predict.compute.stage_seconds``
on one device (no tensor or pipeline parallelism: every GEMM, the attention, the element-wise kernels)
with the profile's launches per layer and GEMM share (``labkit.predict.profiles``), plus what the
profile adds (``profiles.extra_seconds``: unfused fp32 passes, the fp32 cross-entropy, the embedding's
scatter-add backward), the same function the advisor's ``steptime.framework_seconds`` uses. The
optimizer step is the implementation's bytes per parameter at memory bandwidth
(``profiles.optimizer_seconds``), or a calibration's measured seconds per parameter. The host's dispatch
overlaps the layers' kernels (``compute.LayerTimes``); the lab's optimizer (``optimizer_host_seconds``) is a
Python loop over every parameter tensor, whose host time (``profiles.LAB_ADAMW_HOST_OPS`` bare ops a tensor,
measured) exceeds its bytes' on a model of many small tensors (GPT-2's biases and norms): on a GPU its step
takes the slower of the two; the training loop's ``loss.item()`` (``rig.step.training_step``) empties the
queue before it, so nothing of the backward hides it. On a CPU (``overlapped=False``) the optimizer stays
its bytes or its measured seconds: there a calibration's ``launch_s`` is an OpenMP region's, not a bare op's.
torch's foreach and fused AdamW launch a few kernels per step, not per tensor: no host term. The default
profile is ``eager``: ``labkit measure``, ``tools/gpu_check.sh`` and ``labkit bench`` run eager PyTorch.
The device is the catalogue's (the datasheet) or a calibrated one (``labkit.hardware.calibration``),
whose measured launch cost replaces the profile's.
"""

from __future__ import annotations

from dataclasses import replace

from labkit.hardware.calibration import Calibration
from labkit.hardware.types import Device
from labkit.predict.attention import attention_kind
from labkit.predict.compute import stage_seconds
from labkit.predict.eager_elementwise import Precision
from labkit.predict.profiles import EAGER_BARE_OP_S, LAB_ADAMW_HOST_OPS, extra_seconds, optimizer_seconds, profile
from labkit.shapes import ModelShape
from labkit.shapes.tensors import parameter_tensors

DEFAULT_PROFILE = "eager"


def gemm_shapes(shape: ModelShape, rows: int) -> list[tuple[int, int, int]]:
    """(m, n, k) of a layer's projections (QKV, attention output, MLP up, MLP down) and the output layer, at
    ``rows`` tokens: the shapes ``labkit calibrate`` times."""
    h, kv, f = shape.hidden, shape.kv_hidden, shape.ffn_size
    return [(rows, h + 2 * kv, h), (rows, h, h), (rows, f, h), (rows, h, f), (rows, shape.vocab, h)]


def model_gemms(shape: ModelShape, rows: int) -> list[tuple[int, int, int, int]]:
    """(m, n, k, count) of one forward's GEMMs: each layer's projections (the gated MLP's up twice), the output
    layer once: what ``Calibration.device_for`` reads one model's GEMM rate for."""
    up = 2 if shape.gated else 1
    counts = [shape.layers, shape.layers, up * shape.layers, shape.layers, 1]
    return [(m, n, k, c) for (m, n, k), c in zip(gemm_shapes(shape, rows), counts, strict=True)]


def optimizer_host_seconds(shape: ModelShape, optimizer: str = "lab", master_weights: bool = False,
                           bare_op_s: float = EAGER_BARE_OP_S) -> float:
    """The host's seconds of one optimizer step: for the lab's single-tensor loop, its parameter tensors
    (``shapes.tensors.parameter_tensors``) times ``profiles.LAB_ADAMW_HOST_OPS`` (measured in bare ops) times
    one bare op's seconds (the H200's, ``profiles.EAGER_BARE_OP_S``, or a calibration's ``launch_s``); torch's
    foreach and fused AdamW launch a few kernels a step: 0."""
    if optimizer != "lab":
        return 0.0
    return len(parameter_tensors(shape)) * LAB_ADAMW_HOST_OPS[master_weights] * bare_op_s


def step_seconds(shape: ModelShape, seq: int, batch: int, device: Device, dtype: str = "bf16",
                 attention: str = "fused", launch_s: float | None = None,
                 adamw_s_per_param: float | None = None, framework: str = DEFAULT_PROFILE,
                 optimizer: str = "lab", master_weights: bool = False,
                 loss_s_per_logit: float | None = None, overlapped: bool = True) -> dict[str, float]:
    """Seconds of forward, backward (with the profile's extra passes) and the optimizer step of one micro-batch
    on ``device``, and their sum. ``attention`` takes any spelling (``predict.attention``); ``launch_s`` (one
    op's measured dispatch and launch) replaces the profile's (``Profile.measured_launch``); ``overlapped``
    whether the host's dispatch overlaps the kernels (``compute.LayerTimes``: a GPU's asynchronous queue), False
    on a CPU, whose cores run the ops they dispatch, so each op's host cost adds to its kernel;
    ``optimizer`` is the AdamW implementation (``profiles.OPTIMIZER_IMPLEMENTATIONS``; the lab's single-tensor
    one by default), ``master_weights`` the lab's fp32 master copies under bf16-mixed; ``loss_s_per_logit`` a
    calibration's measured cross-entropy."""
    prof = profile(framework)
    if launch_s is not None:
        prof = prof.measured_launch(launch_s)
    if not overlapped:
        prof = replace(prof, launch_s=prof.dispatch_s or prof.launch_s, dispatch_s=0.0)
    if master_weights and prof.counted is not None:  # the lab's bf16-mixed: a bf16 model, no autocast, dropout 0
        prof = replace(prof, counted=Precision(2, autocast=False, dropout=False))
    st = stage_seconds(shape, seq, batch, 1, 1, device, dtype, flash=attention_kind(attention) == "fused",
                       gemm_efficiency=prof.gemm_efficiency, **prof.layer_kwargs(shape))
    extra = extra_seconds(shape, seq, batch, 1, 1, device, prof, loss_s_per_logit=loss_s_per_logit)
    opt = optimizer_seconds(shape.params, device, optimizer, master_weights, adamw_s_per_param)
    if overlapped:  # the host's loop and the GPU's kernels overlap: the slower of the two
        bare = EAGER_BARE_OP_S if launch_s is None else launch_s
        opt = max(opt, optimizer_host_seconds(shape, optimizer, master_weights, bare))
    out = {"forward": st["forward"], "backward": st["backward"] + extra, "optimizer": opt}
    return out | {"total": sum(out.values())}


def lab_master_weights(precision: str) -> bool:
    """Whether the lab's AdamW keeps fp32 master weights: in every mixed precision (``labkit.rig.train``)."""
    return precision != "fp32"


def calibrated_step_seconds(shape: ModelShape, seq: int, batch: int, base: Device | None, calibration: Calibration,
                            attention: str = "fused", master_weights: bool = False,
                            dtype: str | None = None) -> float:
    """One step's seconds on a calibrated machine: this model's GEMM rate read off ``calibration``
    (``Calibration.device_for`` on a GPU ``base``, ``host_device`` on the host), its measured launch cost,
    AdamW seconds per parameter and cross-entropy; GEMMs in ``dtype`` (default: the calibration's)."""
    gemms = model_gemms(shape, seq * batch)
    dev = calibration.device_for(base, gemms) if base is not None else calibration.host_device(gemms=gemms)
    return step_seconds(shape, seq, batch, dev, dtype or calibration.dtype, attention, calibration.launch_s,
                        calibration.adamw_s_per_param, master_weights=master_weights,
                        loss_s_per_logit=calibration.loss_s_per_logit, overlapped=base is not None)["total"]
