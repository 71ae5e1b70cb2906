"""The one source for the offload strategies' bytes: where each model state lives, what moves per step.

Each term's bytes per parameter are read from ``labkit.predict.bytes_per_param``.

Every figure is a sum of named terms (:class:`Term`), each with its reason, so two accountings
that differ can be told apart term by term (:func:`difference`). Units: bytes per parameter
(Psi parameters); a term marked ``sharded`` is divided over the ``dp`` data-parallel GPUs
(ZeRO's partitioning), an unsharded one is held in full by every GPU. Traffic terms are per
training step, summed over the whole job (each GPU moves its ``1/dp`` share of a sharded one).

Strategies (mixed precision with Adam throughout: 16-bit parameters and gradients, fp32 master
weights and two fp32 moments):

* :data:`ZERO3` keeps everything in HBM, sharded: ZeRO stage 3's (2 + 2 + 12) Psi / N_d
  (Rajbhandari et al., SC 2020, section 5, Figure 1).
* :data:`ZERO_OFFLOAD` is Ren et al., "ZeRO-Offload", USENIX ATC 2021 (section 4): built on
  ZeRO-2, so every GPU keeps the full 16-bit parameters (2 Psi per GPU, not divided by N_d);
  the 16-bit gradients and the fp32 optimizer states (2 + 12 = 14 Psi, partitioned over the
  data-parallel ranks) and the Adam step live on the CPU; per step 2 Psi of gradients go down
  and 2 Psi of updated parameters come up over PCIe.
* :data:`ZERO3_CPU_OFFLOAD` is the same host side over ZeRO-3 (DeepSpeed's ``offload_optimizer``
  with stage 3; ZeRO-Infinity, Rajbhandari et al., SC 2021, lets each state sit on GPU, CPU or
  NVMe): the 16-bit parameters are partitioned too, 2 Psi / N_d per GPU, gathered layer by
  layer as ZeRO-3 does. The two differ only in that term: for Llama-2-70B (69bn parameters)
  on 8 GPUs, 138 GB of 16-bit weights per GPU against 17 GB.
* :data:`ZERO_INFINITY` is Rajbhandari et al., "ZeRO-Infinity", SC 2021, with every model
  state on NVMe, as the paper counts it: 20 bytes per parameter (section 3: 16-bit parameters
  and gradients, 2 + 2, and fp32 parameters, momentum, variance and gradients, 4 x 4), and
  per step (section 4.1) the optimizer states read and written once (2 x 16) and the 16-bit
  parameters loaded three times (forward, recompute, backward) with the 16-bit gradients
  stored once (4 x 2). The GPU keeps only the layers in flight (:func:`working_bytes`).
* :data:`ZERO_INFINITY_LAB` is this lab's streamed run (``offload.zero_infinity``): 14 bytes
  per parameter on disk. The paper's two gradient terms (2 + 4) never reach the disk, because
  a layer's optimizer step runs as soon as its backward is done; its 16-bit parameters are
  fetched once for the forward and once for recompute-plus-backward (the outer layers, kept
  for the whole step, only once), so per step it reads 14 + 2 f_b and writes 14 bytes per
  parameter, f_b being the fraction of parameters in transformer blocks.

The paper's 20 B against the lab's 14 B, and its 22 / 18 B of traffic against the lab's
14 + 2 f_b / 14 B, are exactly the terms :func:`difference` lists.
"""

from __future__ import annotations

from dataclasses import dataclass

from labkit.errors import LabkitError, require_choice, require_positive
from labkit.predict import bytes_per_param as bpp
from labkit.predict.bytes_per_param import FP32, GRAD16, GRAD32, WEIGHT16

PLACES = ("gpu", "host", "nvme")
FLOWS = ("link_down", "link_up", "nvme_read", "nvme_write", "step_read", "step_write")
# Layers of 16-bit weights on the GPU while streaming (ZeRO-Infinity's working set: the layer
# running and the one being prefetched), Rajbhandari et al., SC 2021, section 5.
LAYERS_IN_FLIGHT = 2


@dataclass(frozen=True)
class Term:
    """One named quantity: ``bytes_per_param`` bytes per parameter, and why it is there.

    ``sharded``: divided over the data-parallel GPUs. ``blocks_only``: counts only the
    parameters inside transformer blocks (scaled by the block fraction f_b).
    """

    name: str
    bytes_per_param: float
    why: str
    sharded: bool = True
    blocks_only: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.bytes_per_param, bool) or not isinstance(self.bytes_per_param, (int, float)) \
                or self.bytes_per_param < 0:
            raise LabkitError(f"bytes_per_param must be a non-negative number (got {self.bytes_per_param!r})")

    def value(self, dp: int = 1, block_fraction: float = 1.0) -> float:
        """Bytes per parameter of the whole model on one GPU (``dp`` ways sharded if ``sharded``)."""
        return self.bytes_per_param * (block_fraction if self.blocks_only else 1.0) / (dp if self.sharded else 1)


@dataclass(frozen=True)
class OffloadModel:
    """Where one strategy keeps the model states and what it moves per step, term by term."""

    name: str
    source: str
    zero_stage: int
    gpu: tuple[Term, ...] = ()
    host: tuple[Term, ...] = ()
    nvme: tuple[Term, ...] = ()
    link_down: tuple[Term, ...] = ()  # GPU -> host over PCIe, per step
    link_up: tuple[Term, ...] = ()  # host -> GPU over PCIe, per step
    nvme_read: tuple[Term, ...] = ()
    nvme_write: tuple[Term, ...] = ()
    step_read: tuple[Term, ...] = ()  # the Adam step's own reads and writes, wherever it runs
    step_write: tuple[Term, ...] = ()
    streams_layers: bool = False  # the GPU keeps only LAYERS_IN_FLIGHT layers of 16-bit weights

    def terms(self, where: str) -> tuple[Term, ...]:
        require_choice("where", where, PLACES + FLOWS)
        return getattr(self, where)

    def bytes_per_param(self, where: str, dp: int = 1, block_fraction: float = 1.0) -> float:
        """Sum of the terms of ``where`` (a place or a flow) per parameter, on one of ``dp`` GPUs."""
        require_positive("dp", dp)
        if not 0.0 <= block_fraction <= 1.0:
            raise LabkitError(f"block_fraction must be a number in [0, 1] (got {block_fraction!r})")
        return sum((t.value(dp, block_fraction) for t in self.terms(where)), 0.0)

    # ---- the named quantities the other modules use ----
    def gpu_bytes_per_param(self, dp: int = 1) -> float:
        """Model-state bytes per parameter resident on each GPU (layers in flight excluded)."""
        return self.bytes_per_param("gpu", dp)

    @property
    def host_bytes_per_param(self) -> float:
        """Host DRAM bytes per parameter, over the whole job (each GPU's process holds 1/dp)."""
        return self.bytes_per_param("host")

    @property
    def nvme_bytes_per_param(self) -> float:
        """NVMe bytes per parameter, over the whole job."""
        return self.bytes_per_param("nvme")

    @property
    def state_bytes_per_param(self) -> float:
        """All model-state bytes per parameter, wherever they live (one GPU's copy counted once)."""
        return sum(t.bytes_per_param for p in PLACES for t in self.terms(p))

    def link_bytes_per_param(self, block_fraction: float = 1.0) -> float:
        """PCIe bytes per parameter per step, both directions, summed over the job."""
        return self.bytes_per_param("link_down", 1, block_fraction) + self.bytes_per_param("link_up", 1, block_fraction)

    def nvme_read_bytes_per_param(self, block_fraction: float = 1.0) -> float:
        return self.bytes_per_param("nvme_read", 1, block_fraction)

    def nvme_write_bytes_per_param(self, block_fraction: float = 1.0) -> float:
        return self.bytes_per_param("nvme_write", 1, block_fraction)

    def step_bytes_per_param(self) -> float:
        """The optimizer step's reads plus writes per parameter (memory-bound Adam)."""
        return self.bytes_per_param("step_read") + self.bytes_per_param("step_write")

    def table(self, block_fraction: float = 1.0) -> list[dict]:
        """Every term as a row: where, name, bytes per parameter (whole job), sharded, why."""
        return [{"where": w, "term": t.name, "B/param": t.value(1, block_fraction),
                 "sharded": t.sharded, "why": t.why}
                for w in PLACES + FLOWS for t in self.terms(w)]


def working_bytes(params_per_layer: float, tp: int = 1, bytes_16bit: int = 2) -> float:
    """GPU bytes of 16-bit weights in flight for a streaming strategy: LAYERS_IN_FLIGHT layers, / tp."""
    require_positive("params_per_layer", params_per_layer, integer=False)
    require_positive("tp", tp)
    return LAYERS_IN_FLIGHT * bytes_16bit * params_per_layer / tp


def difference(a: OffloadModel, b: OffloadModel, where: str, block_fraction: float = 1.0) -> list[tuple[str, float]]:
    """Terms of ``where`` by which ``a`` exceeds ``b`` (negative: ``b`` has more), as (name, B/param)."""
    def by_name(m: OffloadModel) -> dict[str, float]:
        out: dict[str, float] = {}
        for t in m.terms(where):
            out[t.name] = out.get(t.name, 0.0) + t.value(1, block_fraction)
        return out
    da, db = by_name(a), by_name(b)
    return [(k, da.get(k, 0.0) - db.get(k, 0.0)) for k in dict.fromkeys([*da, *db])
            if da.get(k, 0.0) != db.get(k, 0.0)]


# ---- the terms ---------------------------------------------------------------------------------
P16 = "16-bit parameters"
G16 = "16-bit gradients"
MASTER = "fp32 master parameters"
MOM = "fp32 Adam momentum"
VAR = "fp32 Adam variance"
G32 = "fp32 gradients"

_FP32_STATES = (Term(MASTER, bpp.MASTER, "the optimizer updates fp32 copies (mixed precision, Micikevicius et al. "
                     "2018)"),
                Term(MOM, FP32, "Adam's first moment"), Term(VAR, FP32, "Adam's second moment"))
_ADAM_READ = (Term("Adam reads fp32 parameters, momentum, variance", 3 * FP32, "each read once by the update"),
              Term(f"Adam reads {G16}", GRAD16, "the gradient the update applies"))
_ADAM_WRITE = (Term("Adam writes fp32 parameters, momentum, variance", 3 * FP32, "each written once by the update"),
               Term(f"Adam writes {P16}", WEIGHT16, "the rounded copy the next forward uses"))



def _states_moved(extra: str | None, why: str) -> tuple[Term, ...]:
    """The fp32 optimizer states (and ``extra``, the paper's fp32 gradients) moved once, one term each."""
    names = (MASTER, MOM, VAR) + ((extra,) if extra else ())
    return tuple(Term(n, FP32, why) for n in names)


ZERO3 = OffloadModel(
    "zero3", "Rajbhandari et al., ZeRO, SC 2020, section 5 (Figure 1)", 3,
    gpu=(Term(P16, WEIGHT16, "partitioned over the data-parallel GPUs, gathered per layer"),
         Term(G16, GRAD16, "reduce-scattered: each GPU keeps its partition"), *_FP32_STATES),
    step_read=_ADAM_READ, step_write=_ADAM_WRITE)

_HOST_SIDE = (Term(G16, GRAD16, "each rank's gradient partition, copied down during backward (Ren et al., section 4)"),
              *_FP32_STATES)

ZERO_OFFLOAD = OffloadModel(
    "zero-offload", "Ren et al., ZeRO-Offload, USENIX ATC 2021, section 4", 2,
    gpu=(Term(P16, WEIGHT16, "ZeRO-2 does not partition parameters: every GPU holds all of them", sharded=False),),
    host=_HOST_SIDE,
    link_down=(Term(G16, GRAD16, "gradients go to the CPU, which runs Adam"),),
    link_up=(Term(P16, WEIGHT16, "the updated parameters come back"),),
    step_read=_ADAM_READ, step_write=_ADAM_WRITE)

ZERO3_CPU_OFFLOAD = OffloadModel(
    "zero3-cpu-offload", "ZeRO-3 with the optimizer offloaded to the CPU (Rajbhandari et al., ZeRO-Infinity, SC 2021)",
    3,
    gpu=(Term(P16, WEIGHT16, "ZeRO-3 partitions the parameters over the data-parallel GPUs"),),
    host=_HOST_SIDE,
    link_down=ZERO_OFFLOAD.link_down, link_up=ZERO_OFFLOAD.link_up,
    step_read=_ADAM_READ, step_write=_ADAM_WRITE)

ZERO_INFINITY = OffloadModel(
    "zero-infinity", "Rajbhandari et al., ZeRO-Infinity, SC 2021, sections 3 and 4.1", 3,
    nvme=(Term(P16, WEIGHT16, "section 3's model states"), Term(G16, GRAD16, "section 3's model states"),
          *_FP32_STATES,
          Term(G32, GRAD32, "section 3 counts an fp32 copy of the gradients among the optimizer states")),
    link_up=(Term(f"{P16} for forward", WEIGHT16, "section 4.1: parameters loaded for the forward"),
             Term(f"{P16} for recompute", WEIGHT16, "section 4.1: loaded again to recompute checkpointed activations"),
             Term(f"{P16} for backward", WEIGHT16, "section 4.1: and for the backward")),
    link_down=(Term(G16, GRAD16, "section 4.1: gradients stored once"),),
    nvme_read=(Term(f"{P16} for forward", WEIGHT16, "every load comes from NVMe"),
               Term(f"{P16} for recompute", WEIGHT16, "every load comes from NVMe"),
               Term(f"{P16} for backward", WEIGHT16, "every load comes from NVMe"),
               *_states_moved(G32, "section 4.1: the optimizer states are read once per step")),
    nvme_write=(Term(G16, GRAD16, "section 4.1: gradients stored once"),
                *_states_moved(G32, "section 4.1: and written once per step")),
    step_read=_ADAM_READ, step_write=_ADAM_WRITE, streams_layers=True)

ZERO_INFINITY_LAB = OffloadModel(
    "zero-infinity-lab", "this lab's streamed run, labkit.offload.zero_infinity (measured to the byte)", 3,
    nvme=(Term(P16, WEIGHT16, "one bf16 file per layer group"), *_FP32_STATES),
    nvme_read=(Term(f"{P16} for forward", WEIGHT16, "every group fetched once for the forward"),
               Term(f"{P16} for backward", WEIGHT16, "blocks fetched again; recompute and backward share the fetch "
                    "(the outer layers stay for the whole step)", blocks_only=True),
               *_states_moved(None, "a group's states are read once, just before its update")),
    nvme_write=(*_states_moved(None, "written back once by the update"),
                Term(P16, WEIGHT16, "the rounded parameters for the next step")),
    step_read=_ADAM_READ, step_write=_ADAM_WRITE, streams_layers=True)

MODELS = {m.name: m for m in (ZERO3, ZERO_OFFLOAD, ZERO3_CPU_OFFLOAD, ZERO_INFINITY, ZERO_INFINITY_LAB)}


def model(name: str) -> OffloadModel:
    """The strategy called ``name`` (one of ``MODELS``)."""
    require_choice("name", name, tuple(MODELS))
    return MODELS[name]
