"""Where the model states live, how many GPUs that takes, and how long a step lasts: three strategies.

The bytes come from ``labkit.predict.offload_model``, the one source the offload notebook and the advisor
use too (``OFFLOAD_MODELS``):

* ``hbm``: everything on the GPUs, sharded with ZeRO stage 3 (Rajbhandari et al., SC 2020):
  16 bytes per parameter / N GPUs, plus activations; the optimizer step runs in HBM;
* ``dram-offload``: the optimizer offloaded to the CPU over ZeRO-3 (ZeRO-Offload's host side,
  Ren et al., USENIX ATC 2021, with the 16-bit parameters partitioned as ZeRO-3 does: 2 bytes
  per parameter / N GPUs); gradients and fp32 optimizer states (14 bytes per parameter) in host
  DRAM, the Adam step on the CPU; 2 bytes down + 2 up per parameter per step over PCIe;
* ``ssd-offload``: ZeRO-Infinity (Rajbhandari et al., SC 2021): all model states on NVMe (the
  paper's 20 bytes per parameter), streamed through DRAM; the GPU keeps activations and the
  layers in flight.

The bytes each strategy moves per parameter per step are parameters (``Traffic``): the defaults
are ``offload_model``'s (the papers' accounting), and notebook 07 passes the values measured in
notebook 04's runs. Step time = the slowest of compute, PCIe, GPU-to-GPU, CPU step and NVMe when
they overlap (ZeRO-Offload's delayed parameter update, ZeRO-Infinity's overlap engine), their
sum when not. Compute time = the larger of model FLOPs / (GPUs x peak x MFU) and the step's HBM
bytes / (GPUs x HBM bandwidth) (``labkit.predict.compute``, the roofline of Williams et al. 2009);
MFU (``MFU``) is an assumption. GPU-to-GPU is ZeRO-3's two all-gathers of the 16-bit parameters and
one reduce-scatter of the gradients, priced by ``labkit.predict.collectives``.
The server, its DRAM and its SSDs are the catalogue's server for the GPU (``server``: a DGX H100
has 2 TB of DDR5 and eight 3.84 TB U.2 enterprise data drives), unless a plan names others.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from labkit import hardware
from labkit.economics.traffic import GemmTraffic, gemm_traffic
from labkit.errors import LabkitError, require_choice, require_positive
from labkit.predict import collectives as coll
from labkit.predict import compute
from labkit.predict import offload_model as om
from labkit.predict.estimate import activation_bytes_outside_layers, activation_bytes_per_layer, training_flops
from labkit.shapes import ModelShape

STRATEGIES = ("hbm", "dram-offload", "ssd-offload")
OFFLOAD_MODELS = {"hbm": om.ZERO3, "dram-offload": om.ZERO3_CPU_OFFLOAD, "ssd-offload": om.ZERO_INFINITY}
# Assumption: 40% model FLOPs utilisation, below the 46.2% PaLM 540B reached (Chowdhery et al. 2022, Table 3).
MFU = 0.4
# Llama 2 trained with a global batch of 4M tokens (Touvron et al. 2023, section 2.2).
BATCH_TOKENS = 4 * 2**20
USABLE_FRACTION = 0.9  # assumption: 10% of device memory lost to the allocator, buffers and fragmentation
STATE_BYTES = int(om.ZERO3.state_bytes_per_param)  # 16: fp16 weights + gradients + fp32 p, m, v (ZeRO, sec. 3.1)
HOST_STATE_BYTES = int(om.ZERO3_CPU_OFFLOAD.host_bytes_per_param)  # 14: fp16 gradients + fp32 p, m, v
NVME_STATE_BYTES = om.ZERO_INFINITY.nvme_bytes_per_param  # 20: ZeRO-Infinity's count (section 3)
SSDS_PER_SERVER = 8  # the NVIDIA DGX A100 (640 GB) and DGX H100 datasheets: 8 x 3.84 TB U.2 NVMe data drives


@dataclass(frozen=True)
class Traffic:
    """Bytes per parameter per step that a strategy moves, summed over the whole model.

    ``link``: GPU <-> host over PCIe; ``nvme_read`` / ``nvme_write``: SSD; ``optimizer``: the
    Adam step's reads and writes (in HBM or in DRAM, wherever the step runs); ``weights``: the
    weight reads of one pass (forward, recompute, backward) and the gradient write, per GPU and
    micro-batch (``traffic.gemm_traffic`` counts them with the activations each multiply moves).
    """

    link: float
    nvme_read: float
    nvme_write: float
    optimizer: float = om.ZERO3.step_bytes_per_param()  # 28: reads p, m, v + g (14), writes p, m, v + fp16 p (14)
    weights: float = 8.0  # 3 reads of fp16 weights + 1 write of fp16 gradients

    def __post_init__(self) -> None:
        for name in ("link", "nvme_read", "nvme_write", "optimizer", "weights"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                    or value < 0:
                raise LabkitError(f"{name} bytes per parameter must be a non-negative number (got {value!r})")


def _traffic(m: om.OffloadModel) -> Traffic:
    return Traffic(link=m.link_bytes_per_param(), nvme_read=m.nvme_read_bytes_per_param(),
                   nvme_write=m.nvme_write_bytes_per_param(), optimizer=m.step_bytes_per_param())


DEFAULT_TRAFFIC = {s: _traffic(m) for s, m in OFFLOAD_MODELS.items()}


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
    ssd: str = ""  # the catalogue drive of the servers
    host: str = ""  # the catalogue server
    dram: str = ""  # its DRAM tier
    micro_batch: int = 1
    gemm: GemmTraffic | None = None  # HBM bytes of one micro-batch's matrix multiplies
    flop_s: float = 0.0  # the FLOP-bound time; compute_s is the larger of it and the HBM-bound time

    @property
    def stall_s(self) -> float:
        """Seconds per step the GPUs wait: the exposed transfer (or CPU) time."""
        return self.step_s - self.compute_s

    @property
    def micro_batches(self) -> float:
        """Micro-batches per step over all GPUs (each reads the gathered weights again)."""
        return self.sequences_per_step / self.micro_batch

    @property
    def gemm_bytes(self) -> float:
        """HBM bytes of all matrix multiplies of one step, summed over the GPUs."""
        return 0.0 if self.gemm is None else self.gemm.total_bytes * self.micro_batches

    @property
    def optimizer_hbm_bytes(self) -> float:
        """The Adam step's HBM reads and writes when it runs on the GPUs (hbm only)."""
        return self.traffic.optimizer * self.params if self.strategy == "hbm" else 0.0

    @property
    def hbm_bytes(self) -> float:
        """All HBM bytes of one step: the multiplies, the saved activations, the optimizer step in HBM."""
        return self.gemm_bytes + self.activation_bytes_per_step + self.optimizer_hbm_bytes


def server(gpu: str, host: str | None = None) -> hardware.Host:
    """The server a plan runs on: ``host`` if named, else the catalogue's first server built with ``gpu``
    (a DGX of that GPU, whose datasheet gives its DRAM and NVMe data drives), else the DGX H100's."""
    cat = hardware.load_catalogue()
    if host:
        return cat.host(host)
    built = [h for h in cat.hosts_for(gpu) if getattr(h, "kind", "server") == "server"]
    return built[0] if built else cat.host("dgx-h100-host")


def _activation_bytes(shape: ModelShape, seq: int, micro_batch: int) -> float:
    """Saved activations of one micro-batch with full recompute (Korthikanti et al. 2022): 2sbh per layer."""
    per_layer = activation_bytes_per_layer(shape, seq, micro_batch, recompute="full")
    return per_layer * shape.layers + activation_bytes_outside_layers(shape, seq, micro_batch)


def _state_bytes_per_gpu(strategy: str, shape: ModelShape, gpus: int) -> float:
    m = OFFLOAD_MODELS[strategy]
    if m.streams_layers:
        return om.working_bytes(shape.params_per_layer)
    return m.gpu_bytes_per_param(gpus) * shape.params


def min_gpus(strategy: str, shape: ModelShape, device: hardware.Device, seq: int, micro_batch: int = 1,
             usable_fraction: float = USABLE_FRACTION) -> int:
    """The fewest GPUs whose memory holds the strategy's share of the states plus the activations."""
    require_choice("strategy", strategy, STRATEGIES)
    room = device.memory_bytes * usable_fraction - _activation_bytes(shape, seq, micro_batch)
    m = OFFLOAD_MODELS[strategy]
    need = om.working_bytes(shape.params_per_layer) if m.streams_layers else 0.0
    shardable = 0.0 if m.streams_layers else m.gpu_bytes_per_param(1) * shape.params
    if room <= need:
        raise LabkitError(f"micro_batch must be smaller: the activations of {shape.name} at seq {seq} do not fit "
                          f"a {device.name} ({device.memory_bytes / 2**30:.0f} GiB) even with full recompute")
    return max(1, math.ceil(shardable / (room - need)))


def plan(strategy: str, shape: ModelShape, gpu: str, *, gpus: int | None = None, traffic: Traffic | None = None,
         mfu: float = MFU, batch_tokens: int = BATCH_TOKENS, seq: int = 0, micro_batch: int = 1,
         gpus_per_server: int = 8, host: str | None = None, dram: str | None = None, ssd: str | None = None,
         ssds_per_server: int | None = None, inter_node: str = "ib-ndr", overlap: bool = True) -> Plan:
    """Size one strategy (GPU count from memory unless ``gpus`` is given) and time one step.

    ``host``, ``dram``, ``ssd`` and ``ssds_per_server`` default to the GPU's server (``server``):
    its DRAM tier and total, its NVMe data drive and how many it has."""
    require_choice("strategy", strategy, STRATEGIES)
    if not (isinstance(mfu, (int, float)) and not isinstance(mfu, bool) and 0 < mfu <= 1):
        raise LabkitError(f"mfu must be a number in (0, 1] (got {mfu!r})")
    cat = hardware.load_catalogue()
    dev = cat.gpu(gpu)
    host_hw = server(dev.name, host)
    dram_t = cat.tier(dram or getattr(host_hw, "dram", "") or "DDR5-4800")
    ssd_t = cat.tier(ssd or getattr(host_hw, "nvme", "") or "NVMe-PCIe4")
    ssds_per_server = ssds_per_server or getattr(host_hw, "nvme_drives", 0) or SSDS_PER_SERVER
    for name, value in (("batch_tokens", batch_tokens), ("micro_batch", micro_batch),
                        ("gpus_per_server", gpus_per_server), ("ssds_per_server", ssds_per_server)):
        require_positive(name, value)
    seq = seq or shape.seq
    t = traffic or DEFAULT_TRAFFIC[strategy]
    fewest = min_gpus(strategy, shape, dev, seq, micro_batch)
    if gpus is None:
        gpus = fewest
    elif require_positive("gpus", gpus) < fewest:
        raise LabkitError(f"gpus must be at least {fewest} to hold {shape.name} with {strategy} on {dev.name} "
                          f"(got {gpus})")
    psi, model = shape.params, OFFLOAD_MODELS[strategy]
    dram_per_server = getattr(host_hw, "dram_bytes", 0) or host_hw.sockets * dram_t.capacity_bytes
    servers = max(math.ceil(gpus / gpus_per_server), math.ceil(model.host_bytes_per_param * psi / dram_per_server))
    drives = 0
    if strategy == "ssd-offload":
        drives = max(servers * ssds_per_server, math.ceil(model.nvme_bytes_per_param * psi / ssd_t.capacity_bytes))
    sequences = batch_tokens / seq
    gemm = gemm_traffic(shape, seq, micro_batch)
    acts = 2 * _activation_bytes(shape, seq, 1) * sequences  # each saved byte written once, read once
    hbm = gemm.total_bytes * sequences / micro_batch + acts + (t.optimizer * psi if strategy == "hbm" else 0.0)
    flops = training_flops(shape, seq, 1) * sequences  # model FLOPs: recompute is inside the MFU
    flop_s = compute.kernel_seconds(flops / gpus, 0.0, dev, "bf16", mfu)
    compute_s = compute.kernel_seconds(flops / gpus, hbm / gpus, dev, "bf16", mfu, 1.0)
    pcie_s = t.link * psi / gpus / cat.link(dev.pcie).bandwidth
    peer_bytes = 0.0 if gpus == 1 else 2.0 * 3 * psi  # ZeRO-3: 3 Psi fp16 elements per GPU per step
    peer_link = cat.link(dev.nvlink or dev.pcie) if gpus <= gpus_per_server else cat.link(inter_node)
    peer_s = 2 * coll.all_gather(2.0 * psi, gpus, peer_link) + coll.reduce_scatter(2.0 * psi, gpus, peer_link)
    dram_bw = host_hw.dram_bandwidth(dram_t) if hasattr(host_hw, "dram_bandwidth") else \
        host_hw.sockets * dram_t.read_bandwidth
    cpu_s = 0.0 if strategy == "hbm" else t.optimizer * psi / (servers * dram_bw)
    nvme_s = 0.0
    if t.nvme_read or t.nvme_write:
        if drives == 0:
            drives = servers * ssds_per_server
        nvme_s = psi * (t.nvme_read / ssd_t.read_bandwidth + t.nvme_write / ssd_t.write_bandwidth) / drives
    hidden = (pcie_s, peer_s, cpu_s, nvme_s)
    step_s = max(compute_s, *hidden) if overlap else compute_s + pcie_s + cpu_s + nvme_s + max(0.0, peer_s - compute_s)
    per_gpu = _state_bytes_per_gpu(strategy, shape, gpus) + _activation_bytes(shape, seq, micro_batch)
    return Plan(strategy, shape.name, dev.name, psi, gpus, servers, drives, per_gpu, sequences, compute_s, pcie_s,
                peer_s, cpu_s, nvme_s, step_s, t, peer_bytes, acts, ssd_t.name, host_hw.name, dram_t.name, micro_batch,
                gemm, flop_s)
