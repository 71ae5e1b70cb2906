"""Counting model-state bytes: ZeRO's convention and DeepSpeed's, as named choices.

Peers count the same mixed-precision Adam step differently, and each count is right for what it
describes:

* ``zero`` (Rajbhandari et al., "ZeRO", SC 2020, section 3.1): 2 bytes of 16-bit weights, 2 of
  16-bit gradients and K = 12 of fp32 master weights, momentum and variance: 16 bytes per parameter,
  stage 1 sharding the 12, stage 2 the gradients too, stage 3 everything. Offloading the optimizer
  (ZeRO-Offload, Ren et al., ATC 2021) moves the 16-bit gradients and the 12 bytes to host DRAM;
  offloading parameters too (ZeRO-Infinity, Rajbhandari et al., SC 2021) moves the 16-bit weights.
  Sizes print in GB = 1e9 bytes, as ZeRO's tables do.
* ``deepspeed``: the arithmetic of DeepSpeed's estimators, ``estimate_zero2_model_states_mem_needs``
  (``deepspeed/runtime/zero/stage_1_and_2.py``) and ``estimate_zero3_model_states_mem_needs``
  (``stage3.py``). The optimizer keeps fp32 gradients besides the 16-bit ones, so 18 bytes per
  parameter are partitioned: 2 (16-bit gradients) + 4 (fp32 gradients) + 4 (fp32 weights) + 8 (Adam
  moments) at stage 2, where the 2 bytes of 16-bit weights stay whole on every GPU; at stage 3
  the 18 are 2 (16-bit weights) + 16 (fp32 weights, gradients, moments), and every GPU adds a gather
  buffer of 4 bytes x the largest layer's parameters (16-bit weights gathered, 16-bit gradients
  computed). Host memory ("per CPU", i.e. per node) carries the estimators' additional buffer
  factor of 1.5. Sizes print in GiB = 2**30 bytes, which DeepSpeed prints labelled "GB".

For t5-3b (2,851M parameters, largest layer 32M) on one node of 8 GPUs the ``deepspeed`` convention
gives DeepSpeed's published figures: ZeRO-3 6.09 / 0.78 / 0.12 GiB per GPU (nothing offloaded /
optimizer on the CPU / parameters too) with 71.69 / 63.72 GiB of host memory (the two offloads,
``zero_init``), and ZeRO-2 with the optimizer on the CPU 5.31 GiB per GPU. DeepSpeed's documentation
(``docs/code-docs/source/memory.rst``) prints 15.93 for ZeRO-2 without offload because it was
produced by an earlier form of the stage-1/2 estimator, 4 P + 16 P / N (16-bit weights *and* 16-bit
gradients whole on every GPU, only the 16 fp32 bytes partitioned): (4 + 16 / 8) x 2,851e6 / 2**30 =
15.93. The estimator in ``stage_1_and_2.py`` now computes 2 P + 18 P / N, which is 11.28 GiB; this
module implements the current one for stage 2, and :func:`deepspeed_zero2_documented_bytes` the
documented one. That earlier count is what ZeRO *stage 1* holds, so the ``deepspeed`` convention
uses it there (16-bit gradients whole, the other 16 bytes partitioned).

Stage 0 has no DeepSpeed estimator; under ``deepspeed`` it is the same count with nothing
partitioned (2 + 18 = 20 bytes per parameter, which is also what the lab's own mixed-precision
optimizer peaks at). Model parallelism (tp x pp) divides the parameters before any of this: each
rank holds 1 / (tp x pp) of the model, and ZeRO shards over the data-parallel degree.
"""

from __future__ import annotations

from dataclasses import dataclass

from labkit.errors import LabkitError, require_choice, require_positive
from labkit.predict import offload_model as om
from labkit.predict.bytes_per_param import FP32_GRADIENTS, GRAD16, GRAD32, MASTER, MOMENTS, WEIGHT16, ZERO

CONVENTIONS = ("zero", "deepspeed")
UNITS = {"GB": 1e9, "GiB": float(2**30)}
DEFAULT_UNITS = {"zero": "GB", "deepspeed": "GiB"}
OFFLOAD_DEVICES = ("none", "cpu")
BUFFER_FACTOR = 1.5  # DeepSpeed's additional_buffer_factor for host memory
BYTES_PER_PARAM = {"zero": ZERO.bytes_per_param, "deepspeed": FP32_GRADIENTS.bytes_per_param}  # stage 3, no offload
STATE_KEYS = ("parameters", "gradients", "optimizer", "gather_buffer")


@dataclass(frozen=True)
class StateSetup:
    """A model's parameter count and how its states are spread: ZeRO stage, GPUs, offload, largest layer."""

    params: int
    zero_stage: int = 0
    dp: int = 1  # data-parallel degree: ZeRO shards over it
    model_parallel: int = 1  # tp x pp: each rank holds 1 / model_parallel of the parameters
    gpus_per_node: int = 1
    offload_optimizer: str = "none"
    offload_param: str = "none"
    largest_layer: int = 0  # parameters of the largest layer (ZeRO-3's gather buffer); 0 = not counted
    zero_init: bool = True  # DeepSpeed's zero.Init: no whole fp32 copy of the model on the host

    def __post_init__(self) -> None:
        for name in ("params", "dp", "model_parallel", "gpus_per_node"):
            require_positive(name, getattr(self, name))
        require_choice("zero_stage", self.zero_stage, (0, 1, 2, 3))
        require_choice("offload_optimizer", self.offload_optimizer, OFFLOAD_DEVICES)
        require_choice("offload_param", self.offload_param, OFFLOAD_DEVICES)
        if isinstance(self.largest_layer, bool) or not isinstance(self.largest_layer, int) or self.largest_layer < 0:
            raise LabkitError(f"largest_layer must be a non-negative integer (got {self.largest_layer!r})")
        if self.offload_param != "none" and self.zero_stage != 3:
            raise LabkitError(f"offload_param must be none unless zero_stage is 3 (got zero_stage={self.zero_stage})")
        if self.offload_optimizer != "none" and self.zero_stage == 0:
            raise LabkitError("offload_optimizer must be none at zero_stage 0 (ZeRO-Offload shards over ZeRO 1-3)")
        if self.offload_param != "none" and self.offload_optimizer == "none":
            raise LabkitError("offload_param cpu needs offload_optimizer cpu (DeepSpeed offers no other combination)")

    @property
    def gpus(self) -> int:
        return self.dp * self.model_parallel

    @property
    def nodes(self) -> float:
        return self.gpus / self.gpus_per_node


@dataclass(frozen=True)
class StateBytes:
    """Per-GPU bytes of model states by category, and host bytes per node, under one convention."""

    convention: str
    gpu: dict[str, float]
    host_per_node: float

    @property
    def total(self) -> float:
        return sum(self.gpu[k] for k in STATE_KEYS)


def per_param(convention: str, setup: StateSetup) -> dict[str, float]:
    """GPU bytes per parameter of one model-parallel rank, by category (the gather buffer excluded)."""
    require_choice("convention", convention, CONVENTIONS)
    s, n = setup.zero_stage, setup.dp
    opt_off, par_off = setup.offload_optimizer == "cpu", setup.offload_param == "cpu"
    k = MASTER + MOMENTS  # ZeRO's K = 12
    if convention == "zero":
        out = {"parameters": WEIGHT16 / (n if s >= 3 else 1), "gradients": GRAD16 / (n if s >= 2 else 1),
               "optimizer": k / (n if s >= 1 else 1)}
        if opt_off:  # the GPU side of labkit.predict.offload_model, the lab's one source for offload bytes
            out = {"parameters": _zero_offload(s).gpu_bytes_per_param(n), "gradients": 0.0, "optimizer": 0.0}
        if par_off:
            out["parameters"] = 0.0
        return out
    if s == 3:  # stage3.py: 18 P / N, or 2 P / N with the optimizer offloaded, or nothing with both
        out = {"parameters": WEIGHT16 / n, "gradients": GRAD32 / n, "optimizer": k / n}
        if opt_off:
            out["gradients"] = out["optimizer"] = 0.0
        if par_off:
            out["parameters"] = 0.0
        return out
    shard = n if s >= 1 else 1  # stage_1_and_2.py: 2 P + 18 P / N, or 2 P with the optimizer offloaded
    if opt_off:
        return {"parameters": float(WEIGHT16), "gradients": 0.0, "optimizer": 0.0}
    grads = (GRAD16 + GRAD32) / shard if s >= 2 else GRAD16 + GRAD32 / shard  # stage 1 keeps 16-bit grads whole
    return {"parameters": float(WEIGHT16), "gradients": grads, "optimizer": k / shard}


def _zero_offload(stage: int) -> om.OffloadModel:
    """ZeRO-Offload's bytes (Ren et al., ATC 2021) from predict.offload_model: over ZeRO-3 the 16-bit weights shard."""
    return om.ZERO3_CPU_OFFLOAD if stage == 3 else om.ZERO_OFFLOAD


def host_bytes_per_node(convention: str, setup: StateSetup) -> float:
    """Host DRAM one node needs for the states (DeepSpeed: its estimators' "per CPU" column)."""
    require_choice("convention", convention, CONVENTIONS)
    p = setup.params / setup.model_parallel
    per_node, nodes = setup.gpus_per_node, setup.nodes
    opt_off, par_off = setup.offload_optimizer == "cpu", setup.offload_param == "cpu"
    if convention == "zero":  # ZeRO-Offload: 2 + 12 bytes per parameter on the host; parameters too: + 2
        host = _zero_offload(setup.zero_stage).host_bytes_per_param if opt_off else 0.0
        return p * (host + (2 if par_off else 0)) / nodes
    f = BUFFER_FACTOR
    if setup.zero_stage == 3:
        if opt_off:
            fp32 = (18 if par_off else 16) / nodes
            return p * (fp32 if setup.zero_init else max(4 * per_node, fp32)) * f
        return (setup.largest_layer if setup.zero_init else p) * 4 * per_node * f
    if opt_off:
        return p * max(4 * setup.gpus, 16) * f
    return p * 4 * per_node * f


def model_states(setup: StateSetup, convention: str = "zero") -> StateBytes:
    """Per-GPU bytes of weights, gradients, optimizer states and ZeRO-3's gather buffer, and host bytes per node."""
    p = setup.params / setup.model_parallel
    gpu = {k: v * p for k, v in per_param(convention, setup).items()}
    gpu["gather_buffer"] = 4.0 * setup.largest_layer if setup.zero_stage == 3 else 0.0
    if convention == "deepspeed" and setup.zero_stage == 3 and not setup.largest_layer:
        raise LabkitError("largest_layer must be given (a positive parameter count) for ZeRO-3 under the deepspeed "
                          "convention: its estimator adds 4 bytes x the largest layer")
    return StateBytes(convention, gpu, host_bytes_per_node(convention, setup))


def deepspeed_zero2_documented_bytes(params: float, gpus: int) -> float:
    """GPU bytes of DeepSpeed's documented ZeRO-2 estimate without offload, 4 P + 16 P / N (an earlier estimator)."""
    require_positive("gpus", gpus)
    return 4 * params + int(16 * params / gpus)


def in_units(n_bytes: float, units: str) -> float:
    """Bytes in GB (1e9) or GiB (2**30)."""
    return n_bytes / UNITS[require_choice("units", units, UNITS)]


@dataclass(frozen=True)
class PublishedRow:
    """One row of DeepSpeed's t5-3b estimate: labkit's figures beside the documented ones (GiB)."""

    label: str
    gpu_gib: float
    host_gib: float
    published_gpu_gib: float
    published_host_gib: float


_T5_SETUPS = {  # (zero stage, offload_optimizer, offload_param) of each documented row
    "ZeRO-3": (3, "none", "none"), "ZeRO-3, offload optimizer": (3, "cpu", "none"),
    "ZeRO-3, offload optimizer and parameters": (3, "cpu", "cpu"), "ZeRO-2, offload optimizer": (2, "cpu", "none"),
}


def deepspeed_t5_3b() -> list[PublishedRow]:
    """DeepSpeed's published t5-3b estimates (``references.toml``) recomputed under the ``deepspeed`` convention."""
    from labkit.references import section

    ref = section("deepspeed_t5_3b")
    out = []
    for label, gpu, host in zip(ref["rows"], ref["gpu_gib"], ref["host_gib"], strict=True):
        stage, opt, par = require_choice("row", label, _T5_SETUPS) and _T5_SETUPS[label]
        setup = StateSetup(int(ref["params"]), stage, int(ref["gpus_per_node"] * ref["nodes"]), 1,
                           int(ref["gpus_per_node"]), opt, par, int(ref["largest_layer"]))
        st = model_states(setup, "deepspeed")
        out.append(PublishedRow(label, in_units(st.total, "GiB"), in_units(st.host_per_node, "GiB"), gpu, host))
    return out


def published_table(rows: list[PublishedRow]) -> str:
    """The t5-3b rows as text: labkit beside DeepSpeed's documentation, GiB per GPU and per node."""
    from labkit.predict.tables import text_table

    body = [[r.label, f"{r.gpu_gib:.2f}", f"{r.published_gpu_gib:.2f}", f"{r.host_gib:.2f}",
             f"{r.published_host_gib:.2f}"] for r in rows]
    return text_table(["DeepSpeed setting (t5-3b, 8 GPUs)", "GiB/GPU", "docs", "GiB/node (host)", "docs"], body)
