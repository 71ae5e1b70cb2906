"""ZeRO-Offload: 16-bit model on the device, fp32 master weights and the Adam step on the CPU.

Ren et al., "ZeRO-Offload: Democratizing Billion-Scale Model Training", USENIX ATC 2021.
Their data-flow analysis puts the forward and backward passes (O(model x batch) FLOPs) on the
GPU and everything O(model) on the CPU: the fp32 master weights, Adam's two moments and the
update itself. The only traffic left on the PCIe link is, per step, the 16-bit gradients
down (2 Psi bytes) and the updated 16-bit parameters up (2 Psi bytes).

The micro-run keeps the same division with two sets of tensors: the bf16 model (the
"device") and :class:`HostAdamW`'s tensors (the "host"). Every crossing goes through
:meth:`HostAdamW.step`, which counts it. The math is that of ``labkit.rig.train.MasterWeightAdamW``
(same AdamW, same rounding), so losses and parameters are equal bit for bit; only the place
and the explicit copies differ.

Host memory, exactly: 12 bytes/param of master weights and moments, plus one 2 Psi-byte
16-bit buffer that receives the gradients and then carries the 16-bit parameters back (the
paper's "fp16 gradients" on the CPU). Inside ``step`` an fp32 copy of the gradients exists
as a temporary (4 Psi bytes), as in ``MasterWeightAdamW``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn as nn

from labkit.errors import LabkitError, require_positive
from labkit.hardware import gpu, link, tier, transfer_time
from labkit.predict import compute
from labkit.predict.estimate import activation_bytes_outside_layers, activation_bytes_per_layer, training_flops
from labkit.predict.offload_model import ZERO_OFFLOAD
from labkit.references import headline
from labkit.rig.model import count_parameters
from labkit.rig.step import StepHooks, training_step
from labkit.rig.train import MasterWeightAdamW, TrainConfig, Trainer
from labkit.shapes import ModelShape


def _nbytes(tensors: list[torch.Tensor]) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


class HostAdamW(MasterWeightAdamW):
    """The CPU side of ZeRO-Offload: ``MasterWeightAdamW``'s fp32 master weights and moments, plus a 16-bit buffer.

    ``step`` moves the 16-bit gradients down into the host buffer, runs AdamW on the fp32
    master weights there, rounds them to 16 bits in the same buffer and moves them up.
    ``bytes_down``/``bytes_up`` count what crossed the link in the last step.
    """

    def __init__(self, params: list[nn.Parameter], lr: float, weight_decay: float = 0.0) -> None:
        super().__init__(params, lr, weight_decay)
        self.buffer = [torch.empty_like(p, memory_format=torch.contiguous_format) for p in params]
        self.bytes_down = 0
        self.bytes_up = 0

    @torch.no_grad()
    def step(self) -> None:
        self.bytes_down = self.bytes_up = 0
        for p, buf, m in zip(self.params, self.buffer, self.master, strict=True):
            if p.grad is None:
                m.grad = None
                continue
            buf.copy_(p.grad)  # device -> host: 16-bit gradients
            self.bytes_down += buf.numel() * buf.element_size()
            m.grad = buf.float()
        self.inner.step()
        for p, buf, m in zip(self.params, self.buffer, self.master, strict=True):
            buf.copy_(m)  # fp32 -> 16 bit on the host
            p.copy_(buf)  # host -> device: 16-bit parameters
            self.bytes_up += buf.numel() * buf.element_size()
            m.grad = None

    def host_bytes(self) -> dict[str, int]:
        """Bytes held on the host between steps, by category."""
        moments = [t for s in self.inner.state.values() for t in s.values() if t.dim()]
        return {"master_fp32": _nbytes(self.master), "adam_moments_fp32": _nbytes(moments),
                "buffer_16bit": _nbytes(self.buffer)}


@dataclass(frozen=True)
class ZeroOffloadRun:
    """What a micro-run of ZeRO-Offload measured, beside the analytic 2 Psi + 2 Psi."""

    params: int
    losses: list[float]
    bytes_down: list[int]  # per step, device -> host
    bytes_up: list[int]  # per step, host -> device
    device_bytes: dict[str, int]  # measured after a backward pass
    host_bytes: dict[str, int]
    final_params: list[torch.Tensor] = field(repr=False)

    @property
    def predicted_bytes_per_step(self) -> int:
        return offload_bytes_per_step(self.params)


def offload_bytes_per_step(params: int) -> int:
    """Ren et al. 2021, section 4: 2 Psi gradients down + 2 Psi parameters up per step (``offload_model``)."""
    require_positive("params", params)
    return round(ZERO_OFFLOAD.link_bytes_per_param() * params)


def zero_offload_trainer(cfg: TrainConfig) -> Trainer:
    """A ``Trainer`` whose optimizer is :class:`HostAdamW` (bf16 model; fp32 states on the host)."""
    if cfg.precision != "bf16-mixed":
        raise LabkitError(f"precision must be bf16-mixed for ZeRO-Offload (got {cfg.precision!r})")
    trainer = Trainer(cfg)
    trainer.optimizer = HostAdamW(list(trainer.model.parameters()), lr=cfg.lr)  # type: ignore[assignment]
    return trainer


def run_zero_offload(cfg: TrainConfig, steps: int) -> ZeroOffloadRun:
    """Train ``steps`` steps with ZeRO-Offload, measuring link bytes and resident bytes."""
    require_positive("steps", steps)
    trainer = zero_offload_trainer(cfg)
    opt: HostAdamW = trainer.optimizer  # type: ignore[assignment]
    params = list(trainer.model.parameters())
    losses, down, up = [], [], []
    device_bytes: dict[str, int] = {}

    def read_device(_: torch.Tensor) -> None:
        if not device_bytes:
            device_bytes.update({"parameters_16bit": _nbytes(params),
                                 "gradients_16bit": _nbytes([p.grad for p in params if p.grad is not None])})

    def read_link() -> None:
        down.append(opt.bytes_down)
        up.append(opt.bytes_up)

    hooks = StepHooks(after_backward=read_device, after_optimizer=read_link)
    for i in range(steps):
        losses.append(training_step(trainer, i, hooks))
    return ZeroOffloadRun(count_parameters(trainer.model), losses, down, up, device_bytes, opt.host_bytes(),
                          [p.detach().clone() for p in params])


# ---- at scale -------------------------------------------------------------------------------


@dataclass(frozen=True)
class ScaleAssumptions:
    """What the largest-model estimate assumes; every field is shown beside the result.

    A GPT-style family of fixed width (hidden 4096, 32 heads, vocab 50257, seq 1024) whose
    depth grows; micro-batch 1 with full recompute (Chen et al. 2016), so a layer keeps only
    its 16-bit input, plus one layer's full activations while it is recomputed. ``reserve``
    is the fraction of device memory left for the CUDA context, workspace and fragmentation.
    """

    hidden: int = 4096
    heads: int = 32
    vocab: int = 50257
    seq: int = 1024
    micro_batch: int = 1
    reserve: float = 0.1

    def shape(self, layers: int) -> ModelShape:
        return ModelShape("gpt-family", layers, self.hidden, self.heads, self.vocab, self.seq)


@dataclass(frozen=True)
class LargestModel:
    """The deepest model of the family that fits, and what the device holds for it."""

    gpu: str
    bytes_per_param: int
    layers: int
    params: int
    state_bytes: float
    activation_bytes: float
    capacity_bytes: float


def device_bytes(shape: ModelShape, bytes_per_param: int, a: ScaleAssumptions) -> tuple[float, float]:
    """(model-state bytes, activation bytes) on the device under full recompute."""
    per_layer_ckpt = activation_bytes_per_layer(shape, a.seq, a.micro_batch, recompute="full")
    one_layer = activation_bytes_per_layer(shape, a.seq, a.micro_batch, recompute="none")
    acts = shape.layers * per_layer_ckpt + one_layer + activation_bytes_outside_layers(shape, a.seq, a.micro_batch)
    return float(bytes_per_param * shape.params), float(acts)


def largest_model(gpu_name: str = "V100-32GB", bytes_per_param: int = 4,
                  assumptions: ScaleAssumptions | None = None) -> LargestModel:
    """Largest model of the family on one GPU holding ``bytes_per_param`` of model states.

    16: plain PyTorch mixed precision with Adam (ZeRO's 2 + 2 + 12); 4: ZeRO-Offload with
    16-bit parameters and a full set of 16-bit gradients on the device; 2: ZeRO-Offload as
    the paper runs it, gradients streamed to the host bucket by bucket during backward.
    """
    a = assumptions or ScaleAssumptions()
    require_positive("bytes_per_param", bytes_per_param)
    cap = gpu(gpu_name).memory_bytes * (1 - a.reserve)
    lo, hi = 1, 1
    while sum(device_bytes(a.shape(hi), bytes_per_param, a)) <= cap:
        lo, hi = hi, hi * 2
    if sum(device_bytes(a.shape(lo), bytes_per_param, a)) > cap:
        raise LabkitError(f"gpu {gpu_name} cannot hold even one layer of hidden {a.hidden} at "
                          f"{bytes_per_param} bytes/param")
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if sum(device_bytes(a.shape(mid), bytes_per_param, a)) <= cap else (lo, mid)
    s = a.shape(lo)
    st, act = device_bytes(s, bytes_per_param, a)
    best = LargestModel(gpu(gpu_name).name, bytes_per_param, lo, s.params, st, act, cap)
    return best


def largest_model_table(gpu_name: str = "V100-32GB", assumptions: ScaleAssumptions | None = None) -> list[dict]:
    """Plain PyTorch vs ZeRO-Offload (4 and 2 bytes/param on the device) beside the paper's 13B."""
    rows = []
    for label, bpp in (("PyTorch mixed precision (16 B/param)", 16), ("ZeRO-Offload, full 16-bit grads (4 B/param)", 4),
                       ("ZeRO-Offload, grads streamed (2 B/param)", 2)):
        m = largest_model(gpu_name, bpp, assumptions)
        rows.append({"setup": label, "params": m.params, "layers": m.layers})
    ref = headline("ZeRO-Offload")
    rows.append({"setup": f"published: {ref['claim']}", "params": int(ref["params"]), "layers": None})
    return rows


@dataclass(frozen=True)
class StepTime:
    """Seconds of one step: GPU compute, CPU Adam, and the two PCIe transfers."""

    gpu_compute_s: float
    cpu_adam_s: float
    link_down_s: float
    link_up_s: float
    assumptions: str


# read fp32 p, m, v + 16-bit grad (14); write p, m, v + 16-bit p (14)
ADAM_BYTES_PER_PARAM = int(ZERO_OFFLOAD.step_bytes_per_param())


def step_time(shape: ModelShape, gpu_name: str = "V100-32GB", micro_batch: int = 8, cpu_memory: str = "DDR4-3200",
              mfu: float = 0.4, memory_efficiency: float = 0.5) -> StepTime:
    """Compute vs CPU Adam vs PCIe for one step of ``shape`` (one micro-batch, full recompute).

    Assumptions (stated because they set the answer): the GPU runs at ``mfu`` of its 16-bit
    peak; the CPU Adam is memory-bound at ``memory_efficiency`` of the DRAM tier's bandwidth,
    moving 28 bytes/param (Ren et al. vectorise it; compute is not the limit); the link is the
    GPU's PCIe at its nominal per-direction bandwidth.
    """
    dev = gpu(gpu_name)
    pcie = link(dev.pcie)
    dram = tier(cpu_memory)
    psi = shape.params
    flops = training_flops(shape, shape.seq, micro_batch, recompute="full")
    text = (f"GPU at {mfu:.0%} of {dev.peak_flops['fp16'] / 1e12:.0f} TFLOPS, batch {micro_batch} x {shape.seq}, "
            f"full recompute; CPU Adam {ADAM_BYTES_PER_PARAM} B/param at {memory_efficiency:.0%} of "
            f"{dram.name} {dram.read_bandwidth / 1e9:.0f} GB/s; {pcie.name} {pcie.bandwidth / 1e9:.0f} GB/s")
    return StepTime(compute.kernel_seconds(flops, 0.0, dev, "fp16", mfu),
                    ADAM_BYTES_PER_PARAM * psi / (memory_efficiency * dram.read_bandwidth),
                    transfer_time(2 * psi, pcie), transfer_time(2 * psi, pcie), text)
