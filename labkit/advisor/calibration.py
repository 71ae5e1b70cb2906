"""The step-time model against published runs: Narayanan et al., SC 2021, Tables 1 and 2.

Each row of ``datasets/narayanan_sc21.toml`` is priced as ``labkit advise`` prices an explicit
layout (``search.evaluate`` on DGX A100 hosts of A100-80GB, the paper's Selene nodes): the row's
shape, t, p, GPUs and batch, micro-batch 1, full recompute, no sequence parallelism (it came a
year later, Korthikanti et al. 2022), attention without FlashAttention, and for Table 1 the
interleaved schedule (section 5.1) with v chunks per GPU. The paper does not print v: labkit uses
the smallest interleaving the layers per stage allow (:func:`chunks_for`), an assumption stated
in the data file. Table 2's ZeRO-3 rows run ZeRO stage 3 on pure data parallelism at the row's
micro-batch, under the ``deepspeed-2021`` profile (DeepSpeed's ZeRO-3 in Megatron-LM's code, section 5.2).

The paper's step time is derived, not stored: equation 3's FLOPs per iteration,
F = 96 B s l h^2 (1 + s/(6h) + V/(16 l h)), over the achieved TFLOP/s per GPU times the GPUs.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from labkit.advisor import costing, search
from labkit.advisor.costing import Layout
from labkit.errors import read_toml, require_choice
from labkit.predict.tables import text_table
from labkit.shapes import ModelShape

DATA = Path(__file__).resolve().parents[2] / "datasets" / "narayanan_sc21.toml"
TABLES = ("table1", "table2")
# the profile of each table's runs (``profiles``): Table 1 is Megatron-LM as the paper ran it; Table 2's ZeRO-3 rows
# ran DeepSpeed's ZeRO-3 inside that code base ("We integrated ZeRO into our codebase using the DeepSpeed Python
# library", section 5.2)
FRAMEWORK = {"table1": "megatron-2021", "table2": "deepspeed-2021"}


@lru_cache(maxsize=1)
def _data() -> dict:
    return read_toml(DATA, "Narayanan et al. SC 2021 tables")


def rows(table: str = "table1") -> list[dict]:
    """The rows of one table as printed (``table1`` or ``table2``), each with its source."""
    require_choice("table", table, TABLES)
    return list(_data()[table])


def equation3_flops(batch: int, seq: int, layers: int, hidden: int, vocab: int) -> float:
    """FLOPs of one iteration with full recompute, Narayanan et al. 2021, equation 3."""
    return 96 * batch * seq * layers * hidden**2 * (1 + seq / (6 * hidden) + vocab / (16 * layers * hidden))


def chunks_for(layers: int, pp: int) -> int:
    """The interleaved schedule's v: the smallest divisor > 1 of the layers per stage (1 without a pipeline)."""
    per_stage = layers // pp
    if pp == 1 or per_stage == 1:
        return 1
    return min(v for v in range(2, per_stage + 1) if per_stage % v == 0)


@dataclass(frozen=True)
class Comparison:
    """One published run beside labkit's prediction of its step (seconds) and throughput (TFLOP/s per GPU)."""

    table: str
    label: str
    gpus: int
    layout: Layout
    paper_s: float
    predicted_s: float
    paper_tflops: float
    predicted_tflops: float
    feasible: bool
    times: dict

    @property
    def ratio(self) -> float:
        """Predicted over published step time: 1 is exact, above 1 the model is slower than the run."""
        return self.predicted_s / self.paper_s


def _compare(table: str, row: dict) -> Comparison:
    d = _data()
    seq, vocab = d["seq"], d["vocab"]
    shape = ModelShape(f"gpt-{row['params_billion']:g}b", row["layers"], row["hidden"], row["heads"], vocab, seq,
                       source=row["source"])
    n = row["gpus"]
    if table == "table1":
        t, p = row["tp"], row["pp"]
        v = chunks_for(row["layers"], p)
        lay = Layout(n // (t * p), t, p, 1, 0, "full", schedule="interleaved" if v > 1 else "1f1b", chunks=v, sp=False,
                     attention="explicit")
    else:
        lay = Layout(n, 1, 1, row["micro_batch"], 3, "full", sp=False, attention="explicit")
    mc = costing.machine("A100-80GB", n, host="dgx-a100-host", framework=FRAMEWORK[table])
    plan = search.evaluate(shape, seq, row["batch"], lay, mc)
    flops = equation3_flops(row["batch"], seq, row["layers"], row["hidden"], vocab)
    paper = flops / (row["tflops_per_gpu"] * 1e12 * n)
    if plan.feasible:
        step, times = plan.step_s, dict(plan.times)
    else:  # price it anyway: the comparison is of time; the memory verdict is reported beside it
        t_ = costing.step_times(shape, seq, row["batch"], lay, mc)
        step, times = sum(t_[k] for k in costing.TIMES), {k: t_[k] for k in costing.TIMES}
    return Comparison(table, f"{row['params_billion']:g} bn", n, lay, paper, step, row["tflops_per_gpu"],
                      flops / (step * n) / 1e12, plan.feasible, times)


def compare(table: str = "table1", params_billion: float | None = None) -> list[Comparison]:
    """Every row of ``table`` (``table1``: PTD-P weak scaling; ``table2``: ZeRO-3 without model parallelism), or
    only those of the model of ``params_billion`` (as printed)."""
    return [_compare(table, r) for r in rows(table) if params_billion in (None, r["params_billion"])]


def comparison_table(comparisons: list[Comparison]) -> str:
    """The comparison as text: layout, paper and predicted step seconds and TFLOP/s per GPU, their ratio."""
    body = []
    for c in comparisons:
        lay = c.layout
        sched = f"v{lay.chunks}" if lay.schedule == "interleaved" else lay.schedule
        body.append([c.label, c.gpus, f"t{lay.tp} p{lay.pp} d{lay.dp} b{lay.micro_batch}",
                     sched if lay.zero_stage == 0 else f"ZeRO-{lay.zero_stage}", f"{c.paper_s:,.2f}",
                     f"{c.predicted_s:,.2f}", f"{c.ratio:.3f}", f"{c.paper_tflops:g}", f"{c.predicted_tflops:.0f}"])
    head = ["model", "GPUs", "layout", "schedule", "paper s", "labkit s", "ratio", "paper TFLOP/s", "labkit TFLOP/s"]
    return text_table(head, body)


def spread(comparisons: list[Comparison]) -> float:
    """Largest minus smallest predicted/paper ratio: how unevenly the model errs across the rows."""
    ratios = [c.ratio for c in comparisons]
    return max(ratios) - min(ratios)
