"""One layout on one machine: the layout, the judged plan, and its step time, from the validated models.

Memory is ``footprint`` (``labkit.predict.estimate.estimate_memory`` with 8-bit Adam states and
offload as corrections); offload's bytes come from ``labkit.predict.offload_model``, the one
source the economics and offload modules use too (``OFFLOAD_MODELS``): ZeRO-Offload on ZeRO-2
(Ren et al., ATC 2021), the same host side on ZeRO-3 (DeepSpeed's ``offload_optimizer`` with
stage 3), and ZeRO-Infinity on ZeRO-3 (Rajbhandari et al., SC 2021: every state on NVMe, two
layers of 16-bit weights in flight on the GPU).

Step time is ``steptime`` (kernels from a roofline of the shapes, the schedule's bubble, each
collective once with the overlap the real systems achieve, Adam, offload traffic). Dollars,
energy, carbon and the field's units (tokens/s, TFLOP/s, MFU) are ``pricing``'s.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from labkit import hardware
from labkit.advisor import stages, steptime
from labkit.advisor.machine import DEFAULT_HEADROOM, Machine, machine
from labkit.errors import LabkitError, require_choice, require_positive
from labkit.hardware import GB, transfer_time
from labkit.predict import attention as attn
from labkit.predict import collectives as coll
from labkit.predict import compute
from labkit.predict import offload_model as om
from labkit.predict.estimate import PRECISIONS, RECOMPUTE, SCHEDULES
from labkit.shapes import ModelShape

__all__ = ["DEFAULT_HEADROOM", "GOALS", "OFFLOADS", "OFFLOAD_MODELS", "OFFLOAD_STAGE", "TIMES", "Layout", "Machine",
           "Plan", "machine", "offload_model", "step_times"]

OFFLOADS = ("none", "dram", "nvme")
OFFLOAD_MODELS = {"dram": om.ZERO_OFFLOAD, "nvme": om.ZERO_INFINITY}
OFFLOAD_STAGE = {"dram": 2, "nvme": 3}  # the stage each offload is published on (ZeRO-3 + DRAM also allowed)
# fp16-mixed holds and moves the same bytes as bf16-mixed; fp8: GEMMs at the FP8 peak (Transformer Engine), the
# rest in bf16, the states of bf16-mixed; fp32: GEMMs at TF32 where the GPU has it (PyTorch's allow_tf32)
PLAN_PRECISIONS = ("bf16-mixed", "fp32", "fp8")
OPTIMIZER_BITS = (32, 8)
TIMES = steptime.TIMES


def offload_model(offload: str, zero_stage: int) -> om.OffloadModel | None:
    """The ``labkit.predict.offload_model`` strategy a layout's offload runs (None without offload)."""
    if offload == "none":
        return None
    if offload == "dram" and zero_stage == 3:
        return om.ZERO3_CPU_OFFLOAD  # DeepSpeed's offload_optimizer on stage 3
    return OFFLOAD_MODELS[offload]


@dataclass(frozen=True)
class Layout:
    """How one step is spread: degrees, micro-batch, ZeRO stage, recompute, offload, precision, Adam's bits,
    the pipeline schedule with its model chunks per GPU (v), sequence parallelism and the attention kernel."""

    dp: int
    tp: int
    pp: int
    micro_batch: int = 1
    zero_stage: int = 0
    recompute: str = "none"
    offload: str = "none"
    precision: str = "bf16-mixed"
    optimizer_bits: int = 32
    schedule: str = "1f1b"
    chunks: int = 1
    sp: bool = True  # sequence parallelism whenever tp > 1 (it saves memory and moves no extra bytes)
    attention: str = attn.DEFAULT  # "fused": FlashAttention, no s x s matrix in HBM; "explicit": scores held
    first_stage_layers: int = 0  # 0: an even (or balanced) split (``stages``)
    last_stage_layers: int = 0

    def __post_init__(self) -> None:
        for name in ("dp", "tp", "pp", "micro_batch", "chunks"):
            require_positive(name, getattr(self, name))
        require_choice("zero_stage", self.zero_stage, (0, 1, 2, 3))
        require_choice("recompute", self.recompute, RECOMPUTE)
        require_choice("offload", self.offload, OFFLOADS)
        require_choice("precision", self.precision, PLAN_PRECISIONS)
        require_choice("optimizer_bits", self.optimizer_bits, OPTIMIZER_BITS)
        require_choice("schedule", self.schedule, SCHEDULES)
        object.__setattr__(self, "attention", attn.attention_kind(self.attention))  # any spelling, one name
        stages.check(self.first_stage_layers, self.last_stage_layers)
        if self.chunks > 1 and self.schedule != "interleaved":
            raise LabkitError(f"chunks must be 1 unless schedule is interleaved (got chunks={self.chunks} with "
                              f"schedule {self.schedule})")

    @property
    def gpus(self) -> int:
        return self.dp * self.tp * self.pp

    @property
    def states(self) -> str:
        """The precision whose bytes the states follow (fp8 keeps bf16-mixed's)."""
        return "bf16-mixed" if self.precision == "fp8" else self.precision

    @property
    def uneven(self) -> bool:
        return bool(self.first_stage_layers or self.last_stage_layers)

    def stage_layers(self, layers: int) -> tuple[int, ...]:
        """Layers on each pipeline stage (``stages.split``)."""
        return stages.split(layers, self.pp, self.first_stage_layers, self.last_stage_layers)

    @property
    def seq_parallel(self) -> bool:
        return self.sp and self.tp > 1

    @property
    def label(self) -> str:
        parts = [f"dp{self.dp} tp{self.tp} pp{self.pp} b{self.micro_batch}", f"ZeRO-{self.zero_stage}"]
        parts += [f"interleaved v{self.chunks}"] if self.schedule == "interleaved" else []
        parts += ["GPipe"] if self.schedule == "gpipe" else []
        parts += [f"recompute {self.recompute}"] if self.recompute != "none" else []
        parts += [f"offload {self.offload}"] if self.offload != "none" else []
        parts += [self.precision] if self.precision != "bf16-mixed" else []
        parts += ["8-bit Adam"] if self.optimizer_bits == 8 else []
        parts += ["no SP"] if self.tp > 1 and not self.sp else []
        parts += ["explicit attention"] if self.attention == "explicit" else []
        parts += [f"first/last stage {self.first_stage_layers or self.last_stage_layers}/"
                  f"{self.last_stage_layers or self.first_stage_layers} layers"] if self.uneven else []
        return ", ".join(parts)


GOALS = ("fit", "fastest", "cheapest", "greenest")
# "fit": does it fit, and the fastest plan that does
GOAL_METRIC = {"fit": "step_s", "fastest": "step_s", "cheapest": "usd", "greenest": "kg_co2"}


@dataclass(frozen=True)
class Plan:
    """A layout, judged: kept (``feasible``) or not, with the reason, and its figures per step.

    ``usd_basis`` says whether the dollars are rented (cloud GPU-hours) or owned (purchase price
    amortised); ``energy_j`` and ``kg_co2`` are None when the GPU has no energy figures, and
    ``energy_note`` then says what is missing.
    """

    layout: Layout
    feasible: bool
    reason: str
    rule: str = ""  # the first rule broken (``rules.RULES``), "" when kept
    microbatches: int = 0
    memory: dict[str, float] = field(default_factory=dict, hash=False, compare=False)
    usable_bytes: float = 0.0
    times: dict[str, float] = field(default_factory=dict, hash=False, compare=False)
    step_s: float = math.inf
    usd: float = math.inf
    energy_j: float | None = math.inf  # facility energy of one step (IT energy x PUE); None: unknown
    kg_co2: float | None = math.inf
    usd_basis: str = ""
    energy_note: str = ""
    shortfall: float = 0.0  # how far from fitting: the worst place's need over what it holds, minus 1
    tokens: float = 0.0  # tokens per step (global batch x seq)
    model_flops: float = 0.0  # per step, the model's forward and backward without recompute
    hardware_flops: float = 0.0  # per step with what recompute repeats (as Megatron counts them)
    peak_flops: float = 0.0  # one GPU's dense peak at the plan's precision
    framework: str = ""  # the profile it was priced under (``profiles``)
    stage_split: str = ""  # layers per pipeline stage, for people ("5 + 10 x 6 + 5")

    @property
    def memory_bytes(self) -> float:
        return self.memory.get("total", math.inf)

    def _per_gpu_s(self, amount: float) -> float | None:
        ok = amount and math.isfinite(self.step_s) and self.step_s > 0
        return amount / (self.step_s * self.layout.gpus) if ok else None

    @property
    def tokens_per_s_per_gpu(self) -> float | None:
        return self._per_gpu_s(self.tokens)

    @property
    def model_tflops_per_gpu(self) -> float | None:
        """Model TFLOP/s per GPU (no recompute FLOPs): the unit of MFU and of llm-foundry's tables."""
        v = self._per_gpu_s(self.model_flops)
        return None if v is None else v / 1e12

    @property
    def hardware_tflops_per_gpu(self) -> float | None:
        """TFLOP/s per GPU with recompute FLOPs counted, as Narayanan et al. 2021 (equation 3) count them."""
        v = self._per_gpu_s(self.hardware_flops)
        return None if v is None else v / 1e12

    @property
    def mfu(self) -> float | None:
        """Model FLOPs utilisation: model FLOP/s per GPU over its dense peak (Chowdhery et al. 2022, PaLM)."""
        v = self._per_gpu_s(self.model_flops)
        return None if v is None or not self.peak_flops else v / self.peak_flops

    def metric(self, goal: str) -> float:
        require_choice("goal", goal, GOALS)
        value = getattr(self, GOAL_METRIC[goal])
        return math.inf if value is None else value

    def row(self) -> dict:
        """The plan in people's units: GB (1e9 bytes), seconds, USD, kWh and kg CO2 per step (None: unknown)."""
        out = {"plan": self.layout.label, "gpus": self.layout.gpus, "m": self.microbatches,
               "memory_gb": self.memory_bytes / GB, "step_s": self.step_s, "usd": self.usd,
               "kwh": None if self.energy_j is None else self.energy_j / 3.6e6, "kg_co2": self.kg_co2,
               "tokens_per_s_per_gpu": self.tokens_per_s_per_gpu, "model_tflops_per_gpu": self.model_tflops_per_gpu,
               "mfu": self.mfu}
        return out | {"kept": self.feasible, "reason": self.reason}


def dtypes(lay: Layout, dev) -> tuple[str, str]:
    """(element-wise dtype, GEMM dtype) of a layout on ``dev``: fp32 GEMMs at TF32 where the GPU has it."""
    if lay.precision == "fp32":
        return "fp32", "tf32" if "tf32" in dev.peak_flops else "fp32"
    if lay.precision == "fp8" and "fp8" not in dev.peak_flops:
        with_fp8 = [g.name for g in hardware.load_catalogue().gpus if "fp8" in g.peak_flops]
        raise LabkitError(f"precision fp8 needs a GPU with FP8 tensor cores: one of {', '.join(with_fp8)} "
                          f"(got {dev.name})")
    return "bf16", "fp8" if lay.precision == "fp8" else "bf16"


def microbatches(global_batch: int, lay: Layout) -> int:
    return max(1, global_batch // (lay.dp * lay.micro_batch))


def links(lay: Layout, mc: Machine) -> dict:
    """The link each group uses: tp innermost in a node, then dp, then pp (Megatron's rank order).

    A data-parallel group that spans nodes holds node / tp of its GPUs on each node and runs over
    that many of the node's network ports (``collectives.node_link``) where the framework's rings use
    them (``profiles``), else one; a pipeline send goes from each
    GPU of a stage over its own port (Narayanan et al. 2021, section 4.1, scatter/gather)."""
    node, cl = mc.cluster.gpus_per_node, mc.cluster
    dp_on_node = max(1, min(lay.dp, node // lay.tp))
    ports = min(mc.ports, dp_on_node) if mc.profile.aggregate_ports else 1
    dp = cl.intra_node if lay.tp * lay.dp <= node else coll.node_link(cl.inter_node, ports, cl.intra_node)
    return {"tp": cl.intra_node, "dp": dp, "pp": cl.intra_node if lay.gpus <= node else cl.inter_node}


def step_times(shape: ModelShape, seq: int, global_batch: int, lay: Layout, mc: Machine) -> dict[str, float]:
    """Seconds of one step by part (``TIMES``, summing to the step) plus the CPU's share and the bytes moved."""
    dev = mc.cluster.device
    dtype, gemm = dtypes(lay, dev)
    e = PRECISIONS[lay.states].weights
    m, ln = microbatches(global_batch, lay), links(lay, mc)
    prof = mc.profile
    counts = lay.stage_layers(shape.layers)
    k = max((compute.stage_seconds(shape, seq, lay.micro_batch, lay.tp, lay.pp, dev, dtype, lay.seq_parallel,
                                   lay.attention == "fused", lay.recompute, prof.launch_per_layer_s, n,
                                   prof.gemm_efficiency, logits=i == len(counts) - 1, gemm_dtype=gemm)
             for i, n in enumerate(counts) if i in (0, 1, len(counts) - 1)), key=lambda d: sum(d.values()))
    kernels_mb = k["forward"] + k["backward"] + k["recompute"] + steptime.framework_seconds(shape, seq, lay, dev, prof)
    tp_mb = steptime.tp_seconds(shape, seq, lay, ln["tp"], e, kernels_mb if prof.overlap_tp else 0.0)
    pp_mb = steptime.pp_seconds(shape, seq, lay, ln["pp"], mc.cluster.intra_node, e, prof.p2p_sync_s)
    out = dict.fromkeys((*TIMES, "cpu", "peer_bytes", "pcie_bytes", "nvme_read", "nvme_write"), 0.0)
    out["compute"], out["tp"], out["pp"] = m * kernels_mb, m * tp_mb, m * pp_mb
    out["bubble"] = (lay.pp - 1) / lay.chunks * (kernels_mb + tp_mb + pp_mb)
    local = shape.params / (lay.tp * lay.pp)
    moved, out["dp"] = steptime.dp_seconds(local, lay, m, ln["dp"], PRECISIONS[lay.states].grads, e,
                                           k["backward"], kernels_mb, prof)
    out["peer_bytes"] = moved + out["tp"] * coll.bandwidth(ln["tp"]) + out["pp"] * ln["pp"].bandwidth
    shard = local / (lay.dp if lay.zero_stage >= 1 else 1)
    out["optimizer"] = steptime.optimizer_seconds(shard, lay, dev)
    mdl = offload_model(lay.offload, lay.zero_stage)
    if mdl is not None:
        psi = local / lay.dp
        again = 2.0 * (m - 1) if mdl.streams_layers else 0.0  # 16-bit weights fetched again per extra micro-batch
        out["pcie_bytes"] = (mdl.link_bytes_per_param() + again) * psi
        out["nvme_read"] = (mdl.nvme_read_bytes_per_param() + again) * psi
        out["nvme_write"] = mdl.nvme_write_bytes_per_param() * psi
        pcie_s = transfer_time(out["pcie_bytes"], hardware.link(dev.pcie))
        gpus_here = mc.cluster.gpus_per_node
        step_bytes = mdl.step_bytes_per_param() * psi * gpus_here
        out["cpu"] = step_bytes / mc.dram_bandwidth
        nvme_s = 0.0
        if out["nvme_read"] or out["nvme_write"]:
            drives = mc.ssds_per_server / gpus_here
            if mc.ssd is None or drives == 0:
                nvme_s = math.inf
            else:
                nvme_s = (out["nvme_read"] / (mc.ssd.read_bandwidth * drives)
                          + out["nvme_write"] / (mc.ssd.write_bandwidth * drives))
        out["offload"] = max(pcie_s, nvme_s) + out["cpu"]
    return out
