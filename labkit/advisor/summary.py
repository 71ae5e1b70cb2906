"""The seed's summary table: each technique's memory per GPU, bytes on the wire per step, extra compute.

Every figure comes from the model a topic notebook validated against a real run:

* data parallel and ZeRO 1/2/3: ``estimate.model_state_bytes`` and ZeRO's 2 Psi / 3 Psi elements,
  timed as a ring (each GPU sends (N-1)/N of it), as ``inter_layer.scale`` does (ZeRO, SC 2020);
* GPipe and 1F1B: ``estimate.in_flight_microbatches`` (m and p micro-batches held) and the b*s*h
  activations a stage sends on, with the bubble of ``sim.bubble_fraction`` (Narayanan et al. 2021);
* tensor parallel 1D (Megatron), 2D, 2.5D, 3D: ``intra_layer.costs``, the collectives each rank
  makes for the MLP block, counted twice per layer (attention moves the same bytes in 1D; in the
  multi-dimensional modes it is taken as one more MLP-sized block, an approximation); their
  memory scales the states and activations by Colossal-AI's per-device fractions
  (``costs.published``); sequence parallelism moves 1D's bytes (Korthikanti et al. 2022);
* recompute: Korthikanti et al.'s activations and ``reduction.design.extra_compute``;
* 8-bit Adam: ``reduction.design.optimizer_state_bytes`` (Dettmers et al., ICLR 2022);
* ZeRO-Offload and ZeRO-Infinity: the bytes per parameter of ``economics.strategies`` over PCIe
  and NVMe (Ren et al., ATC 2021; Rajbhandari et al., SC 2021).

One step is ``microbatches`` micro-batches per GPU (pipelines use 4 per stage, so the bubble is
the paper's); memory is per GPU, bytes are what one GPU sends per step. GB = 1e9 bytes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from labkit.advisor import costing, footprint
from labkit.advisor.costing import Layout
from labkit.economics import strategies
from labkit.errors import LabkitError, require_positive
from labkit.hardware import GB, load_catalogue
from labkit.intra_layer import costs
from labkit.predict import attention as attn
from labkit.predict.estimate import TrainingSetup, estimate_memory, zero_communication_elements
from labkit.predict.tables import text_table
from labkit.reduction.design import extra_compute
from labkit.shapes import ModelShape, model_shape
from labkit.sim import bubble_fraction


@dataclass(frozen=True)
class Row:
    """One technique: bytes per GPU, bytes sent per GPU per step (and over which link), extra FLOPs."""

    technique: str
    setting: str
    memory_bytes: float
    comm_bytes: float
    link: str
    extra_compute: float  # fraction of the step's FLOPs added
    note: str = ""


def _total(shape: ModelShape, seq: int, **kw) -> float:
    return estimate_memory(TrainingSetup(shape, seq=seq, **{"attention": attn.DEFAULT, **kw})).per_device_bytes["total"]


def _multidim(shape: ModelShape, seq: int, b: int, m: int, mode: str, world: int, depth: int, link: str) -> Row:
    label = {"2d": "2D (Optimus, SUMMA)", "2.5d": "2.5D (Tesseract)", "3d": "3D"}[mode]
    try:
        frac = costs.published(mode, world, depth)
        c = costs.cost(mode, world, "mlp", b * seq, shape.hidden, shape.ffn_size, depth, e=2)
    except LabkitError as err:
        return Row(f"tensor parallel {label}", f"P={world}", math.nan, math.nan, link, 0.0, str(err))
    one = estimate_memory(TrainingSetup(shape, micro_batch=b, seq=seq, attention=attn.DEFAULT)).per_device_bytes
    states = one["parameters"] + one["gradients"] + one["optimizer"]
    mem = states * float(frac["parameters"]) + one["activations"] * float(frac["activations"])
    wire = 2 * shape.layers * m * float(c.wire_bytes())
    grid = costs.grid(mode, world, depth).label
    return Row(f"tensor parallel {label}", grid, mem, wire, link, 0.0,
               "memory scaled by Colossal-AI's per-device fractions; attention counted as one more MLP block")


def summary(model: str | ModelShape = "gpt3-175b", gpu: str = "A100-80GB", gpus: int = 8, seq: int = 0,
            micro_batch: int = 1, microbatches: int = 1) -> list[Row]:
    """The table of the seed for ``model`` on ``gpus`` GPUs of a node (each technique at that degree)."""
    shape = model if isinstance(model, ModelShape) else model_shape(model)
    n, b, m = (require_positive(k, v) for k, v in (("gpus", gpus), ("micro_batch", micro_batch),
                                                   ("microbatches", microbatches)))
    seq = seq or shape.seq
    dev = load_catalogue().gpu(gpu)
    nvl, pcie = dev.nvlink or dev.pcie, dev.pcie
    psi, ring = shape.params, (n - 1) / n
    base = dict(micro_batch=b, microbatches=m)
    rows = [Row("none (one GPU, bf16 mixed precision)", "", _total(shape, seq, **base), 0.0, "-", 0.0,
                "the reference every row is compared with")]
    rows.append(Row("data parallel (DDP)", f"N={n}", _total(shape, seq, dp=n, **base),
                    zero_communication_elements(psi, 0) * 2 * ring, nvl, 0.0, "gradient all-reduce, 2 Psi"))
    for stage in (1, 2, 3):
        comm = zero_communication_elements(psi, stage) * 2 * ring * (m if stage == 3 else 1)
        what = {1: "optimizer states sharded", 2: "+ gradients (reduce-scatter)",
                3: "+ parameters, gathered for each micro-batch: 3 Psi"}[stage]
        rows.append(Row(f"ZeRO-{stage}", f"N={n}", _total(shape, seq, dp=n, zero_stage=stage, **base), comm, nvl,
                        0.0, what))
    p = n if shape.layers % n == 0 else 1
    pm = 4 * p
    for sched, name in (("gpipe", "pipeline GPipe"), ("1f1b", "pipeline 1F1B")):
        mem = _total(shape, seq, micro_batch=b, pp=p, microbatches=pm, schedule=sched)
        held = "m" if sched == "gpipe" else "p"
        rows.append(Row(name, f"p={p}, m={pm}", mem, 2 * pm * 2 * b * seq * shape.hidden, nvl, 0.0,
                        f"holds {held} micro-batches; bubble {100 * bubble_fraction(p, pm):.0f}% idle"))
    t = n if shape.heads % n == 0 else 1
    tp1d = costs.cost("1d", t, "mlp", b * seq, shape.hidden, shape.ffn_size, 1, e=2)
    wire = 2 * shape.layers * m * float(tp1d.wire_bytes())
    rows.append(Row("tensor parallel 1D (Megatron)", f"t={t}", _total(shape, seq, tp=t, **base), wire, nvl, 0.0,
                    "4 all-reduces per layer, not overlapped: keep it inside NVLink"))
    rows.append(Row("sequence parallel (with 1D)", f"t={t}", _total(shape, seq, tp=t, sp=t > 1, **base), wire,
                    nvl, 0.0, "all-gather + reduce-scatter: the same bytes, activations / t"))
    q2 = math.isqrt(n)
    rows.append(_multidim(shape, seq, b, m, "2d", q2 * q2, 1, nvl))
    rows.append(_multidim(shape, seq, b, m, "2.5d", n, 2, nvl))
    rows.append(_multidim(shape, seq, b, m, "3d", n, 1, nvl))
    for rec in ("selective", "full"):
        rows.append(Row(f"recompute {rec}", "", _total(shape, seq, recompute=rec, **base), 0.0, "-",
                        extra_compute(shape, seq, b, rec), "re-runs the forward of what it dropped"))
    rows.append(Row("no mixed precision (fp32)", "", _total(shape, seq, precision="fp32", **base), 0.0, "-", 0.0,
                    f"GEMMs at {'TF32' if 'tf32' in dev.peak_flops else 'fp32'} "
                    f"{dev.peak_flops.get('tf32', dev.peak_flops['fp32']) / 1e12:g} instead of "
                    f"{dev.peak_flops['bf16'] / 1e12:g} TFLOPS"))
    mem8 = footprint.memory(shape, seq, Layout(1, 1, 1, b, optimizer_bits=8), m)["total"]
    rows.append(Row("8-bit Adam states", "", mem8, 0.0, "-", 0.0, "block-wise 8-bit moments, fp32 master kept"))
    for off, name in (("dram", "offload to DRAM (ZeRO-Offload)"), ("nvme", "offload to NVMe (ZeRO-Infinity)")):
        lay = Layout(n, 1, 1, b, costing.OFFLOAD_STAGE[off], "none", off)
        t_ = strategies.DEFAULT_TRAFFIC["dram-offload" if off == "dram" else "ssd-offload"]
        note = (f"Adam on the CPU; states {strategies.HOST_STATE_BYTES} B/param in DRAM" if off == "dram" else
                f"{t_.nvme_read:g} B/param read, {t_.nvme_write:g} written on NVMe per step")
        rows.append(Row(name, f"N={n}", footprint.memory(shape, seq, lay, m)["total"], t_.link * psi / n, pcie, 0.0,
                        note))
    return rows


def summary_table(rows: list[Row]) -> str:
    """The rows as text: GB (1e9 bytes) per GPU, GB sent per GPU per step, extra compute in %."""
    body = [[r.technique, r.setting, f"{r.memory_bytes / GB:,.1f}", f"{r.comm_bytes / GB:,.2f}", r.link,
             f"{100 * r.extra_compute:.1f}%", r.note] for r in rows]
    return text_table(["technique", "setting", "GB/GPU", "GB sent/step", "link", "extra compute", "note"], body)
