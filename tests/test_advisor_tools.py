"""The summary table, the decision flow, the capstone grade and the notebook's exercises."""

from __future__ import annotations

import pytest
from matplotlib.figure import Figure

import labkit.advisor.exercises  # noqa: F401  (registers "09.*")
from labkit.advisor import capstone, flow, search
from labkit.advisor.costing import Layout
from labkit.advisor.summary import summary, summary_table
from labkit.errors import LabkitError
from labkit.predict.estimate import model_state_bytes
from labkit.shapes import model_shape
from labkit.teach.checks import EXERCISES, check

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


@pytest.fixture(scope="module")
def gpt3_advice():
    return search.advise("gpt3-175b", 1536, "A100-80GB", 1024, "fastest", seq=2048)


def test_flow_answers_are_computed_from_the_search(gpt3_advice):
    """ZeRO-3 over 1,024 GPUs holds GPT-3's states in 2.7 GB: the flow must answer yes, whatever the best layout."""
    d = {x.key: x for x in flow.decisions(gpt3_advice)}
    assert [x.key for x in flow.decisions(gpt3_advice)] == list(flow.QUESTIONS)
    assert d["fits_one"].answer is False and d["states_zero"].answer is True
    assert "2.7 GB of states" in d["states_zero"].evidence
    best = gpt3_advice.best.layout
    assert d["tp"].answer == (best.tp > 1) and d["pp"].answer == (best.pp > 1)
    assert d["recompute"].answer == (best.recompute != "none") and d["zero"].answer == (best.zero_stage > 0)
    assert d["zero_only"].answer == any(p.layout.tp == p.layout.pp == 1 for p in gpt3_advice.kept)
    for key, _, uses, _ in flow.CHOICES:  # each choice's evidence names the best plan on the other side
        other = next((p for p in gpt3_advice.kept if uses(p.layout) != uses(best)), None)
        if other is not None:
            assert f"{other.step_s:,.4g} s a step" in d[key].evidence, key
    assert flow.path(gpt3_advice) == [x.key for x in flow.decisions(gpt3_advice) if x.answer]
    assert "2. do the model states fit with ZeRO-3 over 1,024 GPUs? yes" in flow.explain(gpt3_advice)


def test_flow_small_model_fits_one_gpu():
    a = search.advise("gpt2", 64, "A100-80GB", 8, "fastest")
    d = {x.key: x for x in flow.decisions(a)}
    assert d["fits_one"].answer and d["zero_only"].answer


def test_draw_lights_the_yes_answers(gpt3_advice):
    fig = flow.draw(gpt3_advice)
    assert isinstance(fig, Figure)
    patches = fig.axes[0].patches
    lit = [p for p in patches if p.get_linewidth() == 2.0]
    assert len(lit) == len(flow.path(gpt3_advice)) and len(patches) == 2 * len(flow.QUESTIONS)
    boxes = sorted((p.get_x(), p.get_y()) for p in patches)  # one column of questions, one of answers: no crossing
    assert {round(x, 3) for x, _ in boxes} == {0.0, 4.8}
    assert len(flow.draw().axes[0].patches) == len(flow.QUESTIONS)


def test_capstone_grades_plans():
    paper = capstone.grade({"dp": 8, "tp": 8, "pp": 16, "recompute": "full"})
    assert paper.plan.feasible and paper.time_ratio >= 1.0
    diffs = capstone.differences(paper.plan, paper.best)
    term, mine, theirs = diffs[0]
    assert mine - theirs == max(a - b for _, a, b in diffs)  # the largest actual difference, term by term
    assert f"The largest difference from the advisor's best is {term}" in paper.feedback
    shape = GPT3
    terms = capstone.time_terms(paper.plan, shape, 2048, 1536)
    assert sum(terms.values()) == pytest.approx(paper.plan.step_s)
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
    assert EXERCISES["09.pure_dp_gb"].answer() > 16 * 175  # every GPU keeps all 16 bytes per parameter


def test_feedback_names_the_largest_difference_not_the_largest_part():
    """A plan whose bubble is its largest non-compute part, but whose real gap is full against selective recompute."""
    from labkit.advisor.costing import Plan

    mine = Plan(Layout(8, 8, 16, recompute="full"), True, "", microbatches=192,
                times={"compute": 28.0, "bubble": 2.2, "tp": 2.0, "dp": 0.1}, step_s=32.3)
    best = Plan(Layout(128, 8, 1, 2, 2, "selective"), True, "", microbatches=6,
                times={"compute": 21.4, "bubble": 0.0, "tp": 1.4, "dp": 1.1}, step_s=23.9)
    term, a, b = capstone.differences(mine, best)[0]
    assert term == "recompute" and a - b > 2.2
    text = capstone._feedback(mine, best, capstone.GPT3_TASK)
    assert text.startswith("The largest difference from the advisor's best is recompute")
    assert "full against selective" in text


def test_flow_when_nothing_fits():
    a = search.advise("gpt3-175b", 8, "RTX-4090", 1, "fastest")
    assert a.best is None
    d = flow.decisions(a)
    assert [x.answer for x in d[:2]] == [False, False] and "over 1 GPU?" in d[1].question
    assert all(x.answer is None and x.evidence == "no plan fits" for x in d[3:])
    assert len(flow.draw(a, title="no feasible plan").axes[0].patches) == 2 * len(flow.QUESTIONS)


def test_capstone_says_plainly_when_the_learner_beats_the_advisor(monkeypatch):
    """The advisor's best is a search over a finite set: a plan faster than it is named the winner."""
    slow = capstone.grade({"dp": 8, "tp": 8, "pp": 16, "micro_batch": 1, "recompute": "full"}).plan
    fast = capstone.best_plan()
    monkeypatch.setattr(capstone, "best_plan", lambda task=capstone.GPT3_TASK: slow)
    text = str(capstone.grade(fast.layout))
    assert "You beat the advisor: your step is" in text and "shorter than its best plan's" in text
    assert "The largest difference" not in text
