"""One layout on one cluster: memory per GPU, step time, dollars and carbon, from the validated models.

Memory is ``labkit.estimate.estimate_memory`` (ZeRO, SC 2020; Korthikanti et al. 2022; 1F1B
keeps p micro-batches, Narayanan et al. 2021), with three changes it does not model itself:
8-bit Adam moments (``reduction.design.optimizer_state_bytes``, Dettmers et al., ICLR 2022),
ZeRO-Offload (Ren et al., ATC 2021: the GPU keeps 16-bit parameters, gradients and optimizer
states go to host DRAM, ``economics.strategies.HOST_STATE_BYTES`` per parameter) and
ZeRO-Infinity (Rajbhandari et al., SC 2021: all states on NVMe, two layers of 16-bit weights
in flight on the GPU). A GPU holds ``usable_fraction`` of its memory (an assumption, as in
``economics.strategies``).

Step time = compute + pipeline bubble + tensor-parallel collectives + pipeline sends +
exposed data-parallel traffic + offload transfers, where

* compute = training FLOPs (``estimate.training_flops``, recompute included) / (GPUs x peak x
  efficiency); efficiency is ``inter_layer.scale.DEFAULT_EFFICIENCY`` (Megatron-LM ran GPT-3
  class models at about half the A100's peak, SC 2021), an assumption;
* bubble = compute x (p-1)/m (``sim.bubble_fraction``, GPipe and Narayanan et al.);
* tensor parallel: Megatron's two all-reduces per block, forward and backward, for attention and
  MLP (``intra_layer.costs.comm_seconds``, ring over the node's NVLink), not overlapped; sequence
  parallelism moves the same bytes (Korthikanti et al. 2022, 4.2.2); full recompute repeats the
  forward ones;
* data parallel: ZeRO's 2 Psi (3 Psi at stage 3, per micro-batch) elements as a ring
  (``inter_layer.scale.zero_step_seconds``), overlapped with the last micro-batch's backward
  (with all compute at stage 3, whose gathers are prefetched): an assumption;
* offload: 4 bytes per parameter over PCIe and Adam on the CPU at DRAM bandwidth for ZeRO-Offload,
  ZeRO-Infinity's NVMe reads and writes (``economics.strategies.DEFAULT_TRAFFIC``, with the 16-bit
  parameters streamed again for each micro-batch), not overlapped: a conservative bound.

Money is GPU-hours at the catalogue's cloud price (``economics.capital``); energy and carbon are
``economics.energy.step_energy`` times the site's PUE and the grid's intensity (``economics.grid``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache

from labkit import hardware
from labkit.economics import capital, energy, grid, strategies
from labkit.errors import LabkitError, require_choice, require_positive
from labkit.estimate import PRECISIONS, RECOMPUTE, TrainingSetup, estimate_memory, training_flops
from labkit.hardware import GB, Cluster, Host, Tier, transfer_time
from labkit.inter_layer.scale import DEFAULT_EFFICIENCY, zero_step_seconds
from labkit.intra_layer.costs import comm_seconds
from labkit.reduction.design import optimizer_state_bytes
from labkit.shapes import ModelShape
from labkit.sim import bubble_fraction

OFFLOADS = ("none", "dram", "nvme")
OFFLOAD_STAGE = {"dram": 2, "nvme": 3}  # ZeRO-Offload runs on ZeRO-2, ZeRO-Infinity on ZeRO-3
PLAN_PRECISIONS = ("bf16-mixed", "fp32")  # fp16-mixed holds and moves the same bytes as bf16-mixed
OPTIMIZER_BITS = (32, 8)
TIMES = ("compute", "bubble", "tp", "pp", "dp", "offload")


@dataclass(frozen=True)
class Machine:
    """A cluster and what sits beside its GPUs: the host CPUs, their DRAM, the NVMe drives, the grid."""

    cluster: Cluster
    host: Host
    dram: Tier
    ssd: Tier
    ssds_per_server: int = strategies.SSDS_PER_SERVER
    efficiency: float = DEFAULT_EFFICIENCY
    usable_fraction: float = strategies.USABLE_FRACTION
    region: str = "world"
    pue: str = "industry-average"

    @property
    def usable_bytes(self) -> float:
        return self.cluster.device.memory_bytes * self.usable_fraction


def machine(gpu: str, gpus: int, gpus_per_node: int = 8, inter_node: str | None = None, host: str | None = None,
            dram: str | None = None, ssd: str = "NVMe-PCIe4", efficiency: float = DEFAULT_EFFICIENCY,
            region: str = "world") -> Machine:
    """``gpus`` GPUs of the catalogue in nodes of ``gpus_per_node``; defaults follow the GPU's generation.

    A PCIe 5 GPU gets a DGX H100 host (DDR5, NDR InfiniBand), others a DGX A100 host (DDR4, HDR).
    """
    require_positive("gpus", gpus)
    require_positive("gpus_per_node", gpus_per_node)
    if not 0 < efficiency <= 1:
        raise LabkitError(f"efficiency must be a number in (0, 1] (got {efficiency!r})")
    cat = hardware.load_catalogue()
    dev = cat.gpu(gpu)
    new = dev.pcie == "pcie5-x16"
    node = min(gpus, gpus_per_node)
    if gpus % node:
        raise LabkitError(f"gpus must be a multiple of gpus_per_node={gpus_per_node} (got {gpus})")
    inter = inter_node or ("ib-ndr" if new else "ib-hdr")
    cl = hardware.cluster(dev.name, node, gpus // node, inter, cat)
    grid.region(region)
    return Machine(cl, cat.host(host or ("dgx-h100-host" if new else "dgx-a100-host")),
                   cat.tier(dram or ("DDR5-4800" if new else "DDR4-3200")), cat.tier(ssd), efficiency=efficiency,
                   region=region)


@dataclass(frozen=True)
class Layout:
    """How one step is spread: degrees, micro-batch, ZeRO stage, recompute, offload, precision, Adam's bits."""

    dp: int
    tp: int
    pp: int
    micro_batch: int = 1
    zero_stage: int = 0
    recompute: str = "none"
    offload: str = "none"
    precision: str = "bf16-mixed"
    optimizer_bits: int = 32

    def __post_init__(self) -> None:
        for name in ("dp", "tp", "pp", "micro_batch"):
            require_positive(name, getattr(self, name))
        require_choice("zero_stage", self.zero_stage, (0, 1, 2, 3))
        require_choice("recompute", self.recompute, RECOMPUTE)
        require_choice("offload", self.offload, OFFLOADS)
        require_choice("precision", self.precision, PLAN_PRECISIONS)
        require_choice("optimizer_bits", self.optimizer_bits, OPTIMIZER_BITS)

    @property
    def gpus(self) -> int:
        return self.dp * self.tp * self.pp

    @property
    def sp(self) -> bool:
        """Sequence parallelism whenever tp > 1: it saves memory and moves no extra bytes."""
        return self.tp > 1

    @property
    def label(self) -> str:
        parts = [f"dp{self.dp} tp{self.tp} pp{self.pp} b{self.micro_batch}", f"ZeRO-{self.zero_stage}"]
        parts += [f"recompute {self.recompute}"] if self.recompute != "none" else []
        parts += [f"offload {self.offload}"] if self.offload != "none" else []
        parts += ["fp32"] if self.precision == "fp32" else []
        parts += ["8-bit Adam"] if self.optimizer_bits == 8 else []
        return ", ".join(parts)


GOALS = ("fit", "fastest", "cheapest", "greenest")
GOAL_METRIC = {"fit": "memory_bytes", "fastest": "step_s", "cheapest": "usd", "greenest": "kg_co2"}


@dataclass(frozen=True)
class Plan:
    """A layout, judged: kept (``feasible``) or not, with the reason, and its figures per step."""

    layout: Layout
    feasible: bool
    reason: str
    rule: str = ""  # the first rule broken (``search.RULES``), "" when kept
    microbatches: int = 0
    memory: dict[str, float] = field(default_factory=dict, hash=False, compare=False)
    usable_bytes: float = 0.0
    times: dict[str, float] = field(default_factory=dict, hash=False, compare=False)
    step_s: float = math.inf
    usd: float = math.inf
    energy_j: float = math.inf  # facility energy of one step (IT energy x PUE)
    kg_co2: float = math.inf

    @property
    def memory_bytes(self) -> float:
        return self.memory.get("total", math.inf)

    def metric(self, goal: str) -> float:
        require_choice("goal", goal, GOALS)
        return getattr(self, GOAL_METRIC[goal])

    def row(self) -> dict:
        """The plan in people's units: GB (1e9 bytes), seconds, USD, kWh and kg CO2 per step."""
        out = {"plan": self.layout.label, "gpus": self.layout.gpus, "m": self.microbatches,
               "memory_gb": self.memory_bytes / GB, "step_s": self.step_s, "usd": self.usd,
               "kwh": self.energy_j / 3.6e6, "kg_co2": self.kg_co2}
        return out | {"kept": self.feasible, "reason": self.reason}


@lru_cache(maxsize=4096)
def _estimate(shape: ModelShape, seq: int, dp: int, tp: int, pp: int, b: int, m: int, zero: int, recompute: str,
              precision: str) -> dict[str, float]:
    setup = TrainingSetup(shape, micro_batch=b, seq=seq, precision=precision, recompute=recompute, dp=dp, tp=tp,
                          pp=pp, sp=tp > 1, zero_stage=zero, microbatches=m)
    return dict(estimate_memory(setup).per_device_bytes)


def memory(shape: ModelShape, seq: int, lay: Layout, m: int) -> dict[str, float]:
    """Bytes per GPU by category (parameters, gradients, optimizer, activations, total) and off the GPU."""
    mem = dict(_estimate(shape, seq, lay.dp, lay.tp, lay.pp, lay.micro_batch, m, lay.zero_stage, lay.recompute,
                         lay.precision))
    psi = shape.params
    if lay.optimizer_bits == 8:
        mem["optimizer"] *= optimizer_state_bytes(psi, lay.precision, 8) / optimizer_state_bytes(psi, lay.precision)
    shard = psi / lay.gpus
    mem["dram"] = mem["nvme"] = 0.0
    if lay.offload == "dram":
        mem["gradients"] = mem["optimizer"] = 0.0
        mem["dram"] = strategies.HOST_STATE_BYTES * shard
    elif lay.offload == "nvme":
        mem["parameters"] = 2 * 2 * shape.params_per_layer / lay.tp  # two layers of 16-bit weights in flight
        mem["gradients"] = mem["optimizer"] = 0.0
        mem["nvme"] = strategies.STATE_BYTES * shard
    mem["total"] = sum(mem[k] for k in ("parameters", "gradients", "optimizer", "activations"))
    return mem


@lru_cache(maxsize=1024)
def _tp_block_seconds(tp: int, rows: int, hidden: int, ffn: int, link: hardware.Link, e: int) -> float:
    return comm_seconds("1d", tp, rows, hidden, ffn, link, e)


def links(lay: Layout, mc: Machine) -> dict[str, hardware.Link]:
    """The link each group uses: tp innermost in a node, then dp, then pp (Megatron's rank order)."""
    node, cl = mc.cluster.gpus_per_node, mc.cluster
    return {"tp": cl.intra_node, "dp": cl.intra_node if lay.tp * lay.dp <= node else cl.inter_node,
            "pp": cl.intra_node if lay.gpus <= node else cl.inter_node}


def step_times(shape: ModelShape, seq: int, global_batch: int, lay: Layout, mc: Machine) -> dict[str, float]:
    """Seconds of one step by part (``TIMES``) plus the CPU optimizer step (``cpu``) and bytes moved."""
    dev, n, e = mc.cluster.device, lay.gpus, PRECISIONS[lay.precision].weights
    m, b, h = global_batch // (lay.dp * lay.micro_batch), lay.micro_batch, shape.hidden
    flops = training_flops(shape, seq, global_batch, lay.recompute)
    compute = flops / (n * dev.peak_flops["fp32" if lay.precision == "fp32" else "bf16"] * mc.efficiency)
    f = bubble_fraction(lay.pp, m)
    ln = links(lay, mc)
    out = dict.fromkeys((*TIMES, "cpu", "peer_bytes", "pcie_bytes", "nvme_read", "nvme_write"), 0.0)
    out["compute"], out["bubble"] = compute, compute * f / (1 - f)
    if lay.tp > 1:
        block = _tp_block_seconds(lay.tp, b * seq, h, shape.ffn_size, ln["tp"], e)
        out["tp"] = 2 * block * (1.5 if lay.recompute == "full" else 1.0) * shape.layers / lay.pp * m
        out["peer_bytes"] += out["tp"] * ln["tp"].bandwidth
    if lay.pp > 1:
        out["pp"] = 2 * m * transfer_time(e * b * seq * h / lay.tp, ln["pp"])
        out["peer_bytes"] += out["pp"] * ln["pp"].bandwidth
    dp_raw = zero_step_seconds(shape.params / (lay.tp * lay.pp), lay.dp, lay.zero_stage, ln["dp"], e)
    dp_raw *= m if lay.zero_stage == 3 else 1
    out["peer_bytes"] += dp_raw * ln["dp"].bandwidth
    # ZeRO-3 prefetches gathers, but only backward (2/3 of compute) is counted as hiding them: a conservative
    # window (Narayanan et al., SC 2021, section 5.4, found their tp/pp layout 70% faster than ZeRO-3).
    window = (2 / 3) * compute if lay.zero_stage == 3 else (2 / 3) * compute / m
    out["dp"] = max(0.0, dp_raw - window)
    if lay.offload != "none":
        t = strategies.DEFAULT_TRAFFIC["dram-offload" if lay.offload == "dram" else "ssd-offload"]
        shard, again = shape.params / n, 4.0 * (m - 1) if lay.offload == "nvme" else 0.0
        pcie = hardware.link(dev.pcie)
        out["pcie_bytes"] = (t.link + again) * shard
        pcie_s = transfer_time(out["pcie_bytes"], pcie)
        out["cpu"] = t.optimizer * shard * mc.cluster.gpus_per_node / (mc.host.sockets * mc.dram.read_bandwidth)
        out["nvme_read"], out["nvme_write"] = (t.nvme_read + again) * shard, t.nvme_write * shard
        drives = mc.ssds_per_server / mc.cluster.gpus_per_node
        nvme_s = out["nvme_read"] / (mc.ssd.read_bandwidth * drives) + out["nvme_write"] / (
            mc.ssd.write_bandwidth * drives)
        out["offload"] = max(pcie_s, nvme_s) + out["cpu"]
    return out


@lru_cache(maxsize=16)
def _rates(gpu: str, host: str, dram: str, ssd: str) -> energy.Rates:
    return energy.rates(gpu, host, dram, ssd)


def price(shape: ModelShape, global_batch: int, lay: Layout, mc: Machine, t: dict[str, float],
          acts_per_gpu: float) -> tuple[float, float, float, float]:
    """(step seconds, USD, facility joules, kg CO2) of one step with times ``t``."""
    dev, n = mc.cluster.device, lay.gpus
    step = sum(t[k] for k in TIMES)
    m = global_batch // (lay.dp * lay.micro_batch)
    usd = (capital.cloud_usd(n, step, dev.name) if dev.cloud_usd_per_hour is not None
           else capital.amortised_usd(n * dev.price_usd, step))
    w = strategies.Traffic(0.0, 0.0, 0.0)
    hbm = n * m * w.weights * shape.params / (lay.tp * lay.pp) + 2 * acts_per_gpu * n
    hbm += w.optimizer * shape.params if lay.offload == "none" else 0.0
    traffic = energy.StepTraffic(
        gpus=n, hosts=math.ceil(n / mc.cluster.gpus_per_node), busy_s=t["compute"], stall_s=step - t["compute"],
        host_busy_s=min(t["cpu"], step), hbm_bytes=hbm, pcie_bytes=n * t["pcie_bytes"], peer_bytes=n * t["peer_bytes"],
        dram_bytes=w.optimizer * shape.params if lay.offload != "none" else 0.0,
        ssd_read_bytes=n * t["nvme_read"], ssd_write_bytes=n * t["nvme_write"])
    if dev.memory_energy_j_per_bit is None:  # no energy figures for this GPU: cost and time only
        return step, usd, math.nan, math.nan
    it = energy.step_energy(traffic, _rates(dev.name, mc.host.name, mc.dram.name, mc.ssd.name))
    facility = it.facility_j(grid.pue(mc.pue))
    return step, usd, facility, grid.carbon_kg(facility, grid.region(mc.region).value)
