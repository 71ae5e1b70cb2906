"""Where the model states live, how many GPUs that takes, and how long a step lasts: three strategies.

* ``hbm``: everything on the GPUs, sharded with ZeRO stage 3 (Rajbhandari et al., SC 2020):
  16 bytes per parameter / N GPUs, plus activations; the optimizer step runs in HBM;
* ``dram-offload``: ZeRO-Offload (Ren et al., USENIX ATC 2021): fp16 parameters on the GPUs,
  gradients and the fp32 optimizer states (14 bytes per parameter) in host DRAM, the Adam
  step on the CPU; 2 bytes down (gradients) + 2 up (parameters) per parameter per step over PCIe;
* ``ssd-offload``: ZeRO-Infinity (Rajbhandari et al., SC 2021): all 16 bytes per parameter on
  NVMe, streamed through DRAM; the GPU keeps activations and a couple of layers' weights.

The bytes each strategy moves per parameter per step are parameters (``Traffic``): the defaults
follow the papers' accounting, and notebook 07 passes the values measured in notebook 04's runs.
Step time = the slowest of compute, PCIe, GPU-to-GPU, CPU step and NVMe when they overlap
(ZeRO-Offload's delayed parameter update, ZeRO-Infinity's overlap engine), their sum when not.
Compute time = model FLOPs / (GPUs x peak x MFU); MFU (``MFU``) is an assumption.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from labkit import hardware
from labkit.errors import LabkitError, require_choice, require_positive
from labkit.estimate import activation_bytes_outside_layers, activation_bytes_per_layer, training_flops
from labkit.shapes import ModelShape

STRATEGIES = ("hbm", "dram-offload", "ssd-offload")
# Assumption: 40% model FLOPs utilisation, below the 46.2% PaLM 540B reached (Chowdhery et al. 2022, Table 3).
MFU = 0.4
# Llama 2 trained with a global batch of 4M tokens (Touvron et al. 2023, section 2.2).
BATCH_TOKENS = 4 * 2**20
USABLE_FRACTION = 0.9  # assumption: 10% of device memory lost to the allocator, buffers and fragmentation
STATE_BYTES = 16  # fp16 weights + fp16 gradients + fp32 master, momentum, variance (ZeRO, section 3.1)
HOST_STATE_BYTES = 14  # ZeRO-Offload's host side: fp16 gradients + fp32 master, momentum, variance
SSDS_PER_SERVER = 8  # as the NVIDIA DGX H100 datasheet (2023): 8 NVMe U.2 data drives per server


@dataclass(frozen=True)
class Traffic:
    """Bytes per parameter per step that a strategy moves, summed over the whole model.

    ``link``: GPU <-> host over PCIe; ``nvme_read`` / ``nvme_write``: SSD; ``optimizer``: the
    Adam step's reads and writes (in HBM or in DRAM, wherever the step runs); ``weights``: per
    GPU, the weight reads (forward, recompute, backward) and gradient write each GPU does in HBM.
    """

    link: float
    nvme_read: float
    nvme_write: float
    optimizer: float = 28.0  # reads fp32 p, m, v + fp16 g (14), writes p, m, v + fp16 p (14)
    weights: float = 8.0  # 3 reads of fp16 weights + 1 write of fp16 gradients

    def __post_init__(self) -> None:
        for name in ("link", "nvme_read", "nvme_write", "optimizer", "weights"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                    or value < 0:
                raise LabkitError(f"{name} bytes per parameter must be a non-negative number (got {value!r})")


DEFAULT_TRAFFIC = {
    "hbm": Traffic(link=0.0, nvme_read=0.0, nvme_write=0.0),
    "dram-offload": Traffic(link=4.0, nvme_read=0.0, nvme_write=0.0),  # 2 down + 2 up (ZeRO-Offload, sec. 4)
    # params read twice (forward, backward: 2 + 2), optimizer states + gradients read (12 + 2);
    # gradients, optimizer states and fp16 params written back (2 + 12 + 2); params and grads cross PCIe
    "ssd-offload": Traffic(link=6.0, nvme_read=18.0, nvme_write=16.0),
}


@dataclass(frozen=True)
class Plan:
    """One strategy sized for one model and GPU: counts, and one step's seconds and bytes."""

    strategy: str
    model: str
    gpu: str
    params: int
    gpus: int
    servers: int
    drives: int  # NVMe drives holding states (ssd-offload), else 0
    per_gpu_bytes: float
    sequences_per_step: float
    compute_s: float
    pcie_s: float
    peer_s: float
    cpu_s: float
    nvme_s: float
    step_s: float
    traffic: Traffic
    peer_bytes_per_gpu: float
    activation_bytes_per_step: float

    @property
    def stall_s(self) -> float:
        """Seconds per step the GPUs wait: the exposed transfer (or CPU) time."""
        return self.step_s - self.compute_s


def _activation_bytes(shape: ModelShape, seq: int, micro_batch: int) -> float:
    """Saved activations of one micro-batch with full recompute (Korthikanti et al. 2022): 2sbh per layer."""
    per_layer = activation_bytes_per_layer(shape, seq, micro_batch, recompute="full")
    return per_layer * shape.layers + activation_bytes_outside_layers(shape, seq, micro_batch)


def min_gpus(strategy: str, shape: ModelShape, device: hardware.Device, seq: int, micro_batch: int = 1,
             usable_fraction: float = USABLE_FRACTION) -> int:
    """The fewest GPUs whose memory holds the strategy's share of the states plus the activations."""
    require_choice("strategy", strategy, STRATEGIES)
    room = device.memory_bytes * usable_fraction - _activation_bytes(shape, seq, micro_batch)
    psi = shape.params
    if strategy == "ssd-offload":
        need, shardable = 2 * 2 * shape.params_per_layer, 0.0  # two layers of fp16 weights in flight
    else:
        need, shardable = 0.0, (STATE_BYTES if strategy == "hbm" else 2) * psi
    if room <= need:
        raise LabkitError(f"micro_batch must be smaller: the activations of {shape.name} at seq {seq} do not fit "
                          f"a {device.name} ({device.memory_bytes / 1e9:.0f} GB) even with full recompute")
    return max(1, math.ceil(shardable / (room - need)))


def plan(strategy: str, shape: ModelShape, gpu: str, *, gpus: int | None = None, traffic: Traffic | None = None,
         mfu: float = MFU, batch_tokens: int = BATCH_TOKENS, seq: int = 0, micro_batch: int = 1,
         gpus_per_server: int = 8, host: str = "dgx-h100-host", dram: str = "DDR5-4800", ssd: str = "NVMe-PCIe4",
         ssds_per_server: int = SSDS_PER_SERVER, inter_node: str = "ib-ndr", overlap: bool = True) -> Plan:
    """Size one strategy (GPU count from memory unless ``gpus`` is given) and time one step."""
    require_choice("strategy", strategy, STRATEGIES)
    if not (isinstance(mfu, (int, float)) and not isinstance(mfu, bool) and 0 < mfu <= 1):
        raise LabkitError(f"mfu must be a number in (0, 1] (got {mfu!r})")
    for name, value in (("batch_tokens", batch_tokens), ("micro_batch", micro_batch),
                        ("gpus_per_server", gpus_per_server), ("ssds_per_server", ssds_per_server)):
        require_positive(name, value)
    cat = hardware.load_catalogue()
    dev, host_hw, dram_t, ssd_t = cat.gpu(gpu), cat.host(host), cat.tier(dram), cat.tier(ssd)
    seq = seq or shape.seq
    t = traffic or DEFAULT_TRAFFIC[strategy]
    fewest = min_gpus(strategy, shape, dev, seq, micro_batch)
    if gpus is None:
        gpus = fewest
    elif require_positive("gpus", gpus) < fewest:
        raise LabkitError(f"gpus must be at least {fewest} to hold {shape.name} with {strategy} on {dev.name} "
                          f"(got {gpus})")
    psi = shape.params
    host_bytes = {"hbm": 0.0, "dram-offload": HOST_STATE_BYTES * psi, "ssd-offload": 0.0}[strategy]
    dram_per_server = host_hw.sockets * dram_t.capacity_bytes
    servers = max(math.ceil(gpus / gpus_per_server), math.ceil(host_bytes / dram_per_server))
    drives = 0
    if strategy == "ssd-offload":
        drives = max(servers * ssds_per_server, math.ceil(STATE_BYTES * psi / ssd_t.capacity_bytes))
    sequences = batch_tokens / seq
    flops = training_flops(shape, seq, 1) * sequences  # model FLOPs: recompute is inside the MFU
    compute_s = flops / (gpus * dev.peak_flops["bf16"] * mfu)
    pcie_s = t.link * psi / gpus / cat.link(dev.pcie).bandwidth
    stage_elems = 2 if strategy == "dram-offload" and fewest == 1 else 3  # ZeRO-2 while fp16 weights fit one GPU
    peer_bytes = 0.0 if gpus == 1 else 2.0 * stage_elems * psi  # ZeRO: 2 or 3 Psi fp16 elements per GPU
    peer_link = cat.link(dev.nvlink or dev.pcie) if gpus <= gpus_per_server else cat.link(inter_node)
    peer_s = peer_bytes / peer_link.bandwidth
    cpu_s = 0.0 if strategy == "hbm" else t.optimizer * psi / (servers * host_hw.sockets * dram_t.read_bandwidth)
    nvme_s = 0.0
    if t.nvme_read or t.nvme_write:
        if drives == 0:
            drives = servers * ssds_per_server
        nvme_s = psi * (t.nvme_read / ssd_t.read_bandwidth + t.nvme_write / ssd_t.write_bandwidth) / drives
    hidden = (pcie_s, peer_s, cpu_s, nvme_s)
    step_s = max(compute_s, *hidden) if overlap else compute_s + pcie_s + cpu_s + nvme_s + max(0.0, peer_s - compute_s)
    per_gpu = {"hbm": STATE_BYTES * psi / gpus, "dram-offload": 2 * psi / gpus,
               "ssd-offload": 4.0 * shape.params_per_layer}[strategy] + _activation_bytes(shape, seq, micro_batch)
    acts = 2 * _activation_bytes(shape, seq, 1) * sequences  # each saved byte written once, read once
    return Plan(strategy, shape.name, dev.name, psi, gpus, servers, drives, per_gpu, sequences, compute_s, pcie_s,
                peer_s, cpu_s, nvme_s, step_s, t, peer_bytes, acts)
