"""What a plan is: a layout (how one step is spread over the GPUs) and the judged plan with its figures.

A layout holds the four parallel degrees, data (dp), tensor (tp), pipeline (pp) and context (cp), with
world size dp x tp x pp x cp, and the options of each GPU's step. Megatron-Core orders ranks tp, cp, dp,
pp (innermost first; ``parallel_state``'s default order "tp-cp-ep-dp-pp"), which ``costing.links``
follows. Context parallelism (Megatron-Core's context parallelism; Liu et al., "Ring Attention",
2023) splits every sequence over cp GPUs and runs attention as a ring exchanging K/V blocks; it needs
the fused attention kernel (Megatron-Core runs it inside Transformer Engine's fused attention) and
splits the sequence into 2 x cp chunks for causal load balance (Megatron's get_batch_on_this_cp_rank).
The plan's units (tokens/s, TFLOP/s, MFU) follow Narayanan et al. 2021 and Chowdhery et al. 2022.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from labkit.advisor import stages
from labkit.errors import LabkitError, require_choice, require_positive
from labkit.hardware import GB
from labkit.predict import attention as attn
from labkit.predict.estimate import RECOMPUTE, SCHEDULES

OFFLOADS = ("none", "dram", "nvme")
# fp16-mixed holds and moves the same bytes as bf16-mixed; fp8: GEMMs at the FP8 peak (Transformer Engine), the
# rest in bf16, the states of bf16-mixed; fp32: GEMMs at TF32 where the GPU has it (PyTorch's allow_tf32)
PLAN_PRECISIONS = ("bf16-mixed", "fp32", "fp8")
OPTIMIZER_BITS = (32, 8)


@dataclass(frozen=True)
class Layout:
    """How one step is spread: degrees, micro-batch, ZeRO stage, recompute, offload, precision, Adam's bits,
    the pipeline schedule with its model chunks per GPU (v), sequence parallelism, the attention kernel and
    context parallelism (``cp`` GPUs share each sequence; module text)."""

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
    cp: int = 1  # context-parallel GPUs sharing each sequence (Megatron-Core's --context-parallel-size)

    def __post_init__(self) -> None:
        for name in ("dp", "tp", "pp", "micro_batch", "chunks", "cp"):
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
        if self.cp > 1 and self.attention == "explicit":
            raise LabkitError(f"cp must be 1 with explicit attention: context parallelism runs attention as a ring "
                              f"of fused blocks (Megatron-Core, in Transformer Engine's fused attention) (got "
                              f"cp={self.cp})")
        if self.recompute == "op" and self.attention == "explicit":
            raise LabkitError("recompute 'op' needs attention fused: torchtitan's op-level policy keeps the SDPA "
                              "kernel's output (labkit.predict.op_recompute) (got attention explicit)")

    @property
    def gpus(self) -> int:
        return self.dp * self.tp * self.pp * self.cp

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
        cp = f" cp{self.cp}" if self.cp > 1 else ""
        parts = [f"dp{self.dp} tp{self.tp} pp{self.pp}{cp} b{self.micro_batch}", f"ZeRO-{self.zero_stage}"]
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
