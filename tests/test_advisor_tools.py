"""The summary table, the decision flow, the capstone grade and the notebook's exercises."""

from __future__ import annotations

import itertools

import pytest
from matplotlib.figure import Figure

import labkit.advisor.exercises  # noqa: F401  (registers "09.*")
from labkit.advisor import capstone, flow
from labkit.advisor.costing import Layout
from labkit.advisor.summary import summary, summary_table
from labkit.checks import EXERCISES, check
from labkit.errors import LabkitError
from labkit.estimate import model_state_bytes
from labkit.shapes import model_shape

GPT3 = model_shape("gpt3-175b")


@pytest.fixture(scope="module")
def rows():
    return {r.technique: r for r in summary("gpt3-175b", "A100-80GB", 8, seq=2048)}


def test_summary_memory_follows_zero(rows):
    none, ddp = rows["none (one GPU, bf16 mixed precision)"], rows["data parallel (DDP)"]
    assert ddp.memory_bytes == none.memory_bytes  # data parallelism replicates everything
    acts = none.memory_bytes - 16 * GPT3.params
    for stage in (1, 2, 3):
        states = sum(model_state_bytes(GPT3.params, "bf16-mixed", stage, 8).values())
        assert rows[f"ZeRO-{stage}"].memory_bytes == pytest.approx(states + acts)
    assert rows["ZeRO-3"].comm_bytes == pytest.approx(1.5 * ddp.comm_bytes)
    assert ddp.comm_bytes == pytest.approx(2 * GPT3.params * 2 * 7 / 8)


def test_summary_tensor_parallel_is_four_all_reduces_per_layer(rows):
    s, h, t = 2048, GPT3.hidden, 8
    ring = 2 * (t - 1) / t * s * h * 2  # one all-reduce of b*s*h 16-bit values, ring bytes per rank
    assert rows["tensor parallel 1D (Megatron)"].comm_bytes == pytest.approx(GPT3.layers * 4 * ring)
    sp = rows["sequence parallel (with 1D)"]
    assert sp.comm_bytes == rows["tensor parallel 1D (Megatron)"].comm_bytes
    assert sp.memory_bytes < rows["tensor parallel 1D (Megatron)"].memory_bytes


def test_summary_trades(rows):
    none = rows["none (one GPU, bf16 mixed precision)"].memory_bytes
    sel, full = rows["recompute selective"], rows["recompute full"]
    assert full.memory_bytes < sel.memory_bytes < none
    assert 0 < sel.extra_compute < 0.05 < 0.25 < full.extra_compute < 0.4
    assert none - rows["8-bit Adam states"].memory_bytes == pytest.approx(6 * GPT3.params, rel=0.01)
    assert rows["no mixed precision (fp32)"].memory_bytes > none
    assert rows["pipeline GPipe"].memory_bytes > rows["pipeline 1F1B"].memory_bytes
    dram, nvme = rows["offload to DRAM (ZeRO-Offload)"], rows["offload to NVMe (ZeRO-Infinity)"]
    assert nvme.memory_bytes < dram.memory_bytes and dram.comm_bytes == pytest.approx(4 * GPT3.params / 8)
    assert rows["tensor parallel 3D"].memory_bytes < rows["tensor parallel 2D (Optimus, SUMMA)"].memory_bytes
    table = summary_table(list(rows.values()))
    assert all(name in table for name in rows) and "GB/GPU" in table


def test_flow_path_of_the_megatron_layout():
    lay = Layout(8, 8, 16, recompute="full")
    assert flow.path(lay) == ["start", "fits_one", "fits_zero", "tp", "pp", "short", "recompute", "precision",
                              "plan"]
    assert flow.path(Layout(8, 1, 1)) == ["start", "fits_one", "dp", "precision", "plan"]
    assert "tensor parallel tp=8" in flow.explain(lay) and "recompute full" in flow.explain(lay)


def test_every_path_follows_drawn_edges():
    for tp, pp, stage, rec, off in itertools.product((1, 8), (1, 4), (0, 1, 3), ("none", "full"),
                                                     ("none", "dram", "nvme")):
        path = flow.path(Layout(2, tp, pp, zero_stage=stage, recompute=rec, offload=off))
        assert all(edge in flow.EDGES for edge in zip(path, path[1:], strict=False)), path


def test_draw_lights_the_path():
    lay = Layout(8, 8, 16, recompute="full")
    fig = flow.draw(lay)
    assert isinstance(fig, Figure)
    lit = [p for p in fig.axes[0].patches if p.get_linewidth() == 2.0]
    assert len(lit) == len(flow.path(lay)) and len(fig.axes[0].patches) == len(flow.NODES)


def test_capstone_grades_plans():
    paper = capstone.grade({"dp": 8, "tp": 8, "pp": 16, "recompute": "full"})
    assert paper.plan.feasible and paper.time_ratio >= 1.0
    assert paper.run_usd == pytest.approx(paper.plan.usd * capstone.GPT3_TASK.steps)
    assert bool(paper) == (paper.run_usd <= capstone.GPT3_TASK.budget_usd)
    assert "Feasible" in str(paper) and "budget" in str(paper)
    pure = capstone.grade(Layout(1024, 1, 1))
    assert not pure and "Not feasible: needs" in pure.feedback and "Hint: shard more" in pure.feedback
    best = capstone.best_plan()
    top = capstone.grade(best.layout)
    assert top.time_ratio == pytest.approx(1.0) and top.cost_ratio == pytest.approx(1.0) and top
    with pytest.raises(LabkitError, match="plan field must be one of"):
        capstone.grade({"dp": 8, "tp": 8, "pp": 16, "zero": 1})
    with pytest.raises(LabkitError, match="missing pp"):
        capstone.grade({"dp": 8, "tp": 8})


def test_exercises_are_registered_and_checked():
    keys = [k for k in EXERCISES if k.startswith("09.")]
    assert len(keys) >= 3
    for key in keys:
        right = EXERCISES[key].answer()
        assert check(key, right) and not check(key, 2 * right + 1)
    assert EXERCISES["09.pure_dp_gb"].answer() > 3000
