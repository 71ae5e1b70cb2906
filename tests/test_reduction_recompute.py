"""Recompute measured beside predicted: bytes exact, FLOPs exact, gradients bit-identical, peaks from a trace."""

import itertools

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from labkit.errors import LabkitError
from labkit.predict.estimate import training_flops
from labkit.reduction.checkpoint_plan import (
    LayerTrace,
    check_peak,
    min_feasible_budget,
    optimal_plan,
    plan_table,
    plan_text,
    predict_peak,
    recompute_cost,
    record_trace,
    uniform_plans,
)
from labkit.reduction.recompute import (
    RecomputePlan,
    after_forward_bytes,
    apply_recompute,
    compare_plans,
    recompute_table,
    remove_recompute,
    run_plan,
    uniform_plan,
)
from labkit.rig.model import GPTConfig, TinyGPT
from labkit.rig.train import TrainConfig
from labkit.shapes import ModelShape

CFG = GPTConfig(vocab_size=35, seq_len=16, n_layer=4, n_head=2, d_model=32, dropout=0.1)
TRAIN = TrainConfig(model=CFG, batch_size=2, threads=1)


@pytest.fixture(scope="module")
def rows():
    return {r.mode: r for r in compare_plans(TRAIN)}


TRAIN6 = TrainConfig(model=GPTConfig(vocab_size=35, seq_len=16, n_layer=6, n_head=2, d_model=32), batch_size=2,
                     threads=1)


@pytest.fixture(scope="module")
def trace():
    return record_trace(TRAIN6)  # six layers: sqrt-all makes three segments of two


def test_every_mode_keeps_exactly_the_predicted_bytes(rows):
    assert set(rows) == {"none", "full", "every-2", "sqrt-all", "selective"}
    for r in rows.values():
        assert r.measured_bytes == r.predicted_bytes, r.mode
    sbh4 = 4 * 16 * 2 * 32
    assert rows["full"].per_layer == (sbh4,) * 4  # e*sbh: the block input, 2sbh at 16 bits
    assert rows["sqrt-all"].per_layer == (sbh4, 0, sbh4, 0)  # only the segment boundaries
    assert rows["every-2"].per_layer == (sbh4, rows["none"].per_layer[1], sbh4, rows["none"].per_layer[3])
    a, s, b = 2, 16, 2
    assert rows["none"].per_layer[0] - rows["selective"].per_layer[0] == a * s * s * b * (2 * 4 + 1)  # the s^2 term
    assert len({r.outside_bytes for r in rows.values()}) == 1


def test_gradients_and_loss_bit_identical_with_dropout_on(rows):
    assert CFG.dropout > 0
    assert all(r.grads_identical for r in rows.values())
    assert len({r.loss for r in rows.values()}) == 1


def test_flops_show_exactly_one_extra_forward_of_the_region(rows):
    shape = ModelShape.from_config(CFG)
    assert rows["none"].flops == training_flops(shape, 16, 2, "none")
    assert rows["full"].flops == training_flops(shape, 16, 2, "full")
    assert rows["sqrt-all"].extra_flops == rows["full"].extra_flops
    assert rows["every-2"].extra_flops * 2 == rows["full"].extra_flops
    assert rows["selective"].extra_flops == 4 * 2 * 2 * 16 * 16 * 32  # L * 2bs^2h: early stop repeats Q K^T only
    for r in rows.values():
        assert r.extra_flops == r.predicted_extra_flops, r.mode
        assert r.step_seconds > 0


def test_selective_without_early_stop_repeats_the_whole_core():
    row, _ = run_plan(TRAIN, "selective", early_stop=False, repeats=1)
    assert row.flops == training_flops(ModelShape.from_config(CFG), 16, 2, "selective")


def test_memtracker_agrees_up_to_the_step_outputs(rows):
    logits_and_loss = 2 * 16 * 35 * 4 + 4
    r = rows["sqrt-all"]
    assert after_forward_bytes(TRAIN, "sqrt-all") == r.measured_bytes + r.outside_bytes + logits_and_loss


def test_wrapping_keeps_names_and_unwraps():
    model = TinyGPT(CFG)
    names = [n for n, _ in model.named_modules()]
    apply_recompute(model, "sqrt-all")
    assert [n for n, _ in model.named_modules()] == names
    assert type(model.h[0]).__name__ == "CheckpointedBlock" and len(list(model.h)) == 2
    remove_recompute(model)
    assert type(model.h[0]).__name__ == "Block" and len(list(model.h)) == 4
    apply_recompute(model, "selective")
    assert type(model.h[3].attn.core).__name__ == "CheckpointedExplicitAttention"


def test_bad_input_names_the_field():
    with pytest.raises(LabkitError, match="mode must be one of"):
        uniform_plan("half", 4)
    with pytest.raises(LabkitError, match="needs k"):
        uniform_plan("every-k", 4)
    with pytest.raises(LabkitError, match="segments"):
        RecomputePlan("x", 4, ((2, 3), (1, 2)))
    with pytest.raises(LabkitError, match="n_layer=4"):
        apply_recompute(TinyGPT(CFG), RecomputePlan("x", 3, ((0, 1),)))
    with pytest.raises(LabkitError, match="TinyGPT"):
        apply_recompute(torch.nn.Linear(2, 2), "full")


def test_trace_predicts_real_peaks_of_uniform_and_optimal_plans(trace):
    assert uniform_plan("sqrt-all", 6).segments == ((0, 2), (2, 4), (4, 6))
    none_peak = predict_peak(trace, uniform_plan("none", 6))
    budget = (min_feasible_budget(trace) + none_peak) // 2
    best = optimal_plan(trace, budget)
    assert best.predicted_peak <= budget
    table = plan_table(trace, budget)
    assert all(best.recompute_flops <= p.recompute_flops for p in table if p.fits)
    assert any(p.fits and p.recompute_flops > best.recompute_flops for p in table[:-1])  # the DP saves work
    for plan in (uniform_plan("sqrt-all", 6), best.plan):
        check = check_peak(TRAIN6, trace, plan)
        assert 0 <= 100 * check.error < 0.05, check  # safe side, see checkpoint_plan's docstring
    assert check.measured <= budget
    text = plan_text(table, budget)
    assert "optimal" in text and "sqrt-all" in text


def test_table_lists_every_mode(rows):
    text = recompute_table(list(rows.values()))
    assert all(mode in text for mode in rows) and "NO" not in text


def test_infeasible_budget_names_the_smallest_feasible(trace):
    least = min_feasible_budget(trace)
    with pytest.raises(LabkitError, match=f"{least:,}"):
        optimal_plan(trace, least - 1)
    assert optimal_plan(trace, least).predicted_peak == least


def _all_plans(n: int):
    """Every partition of n blocks into stored blocks and checkpointed segments."""
    for cuts in itertools.product((0, 1, 2), repeat=n):  # 0 stored, 1 starts a segment, 2 continues one
        if cuts and cuts[0] == 2:
            continue
        segs, i = [], 0
        ok = True
        while i < n:
            if cuts[i] == 1:
                j = i + 1
                while j < n and cuts[j] == 2:
                    j += 1
                segs.append((i, j))
                i = j
            elif cuts[i] == 2:
                ok = False
                break
            else:
                i += 1
        if ok:
            yield RecomputePlan("brute", n, tuple(segs))


@st.composite
def traces(draw):
    n = draw(st.integers(1, 6))
    stored = draw(st.lists(st.integers(1_000, 80_000), min_size=n, max_size=n))
    inputs = [draw(st.integers(100, s)) for s in stored]
    grads = draw(st.integers(0, 60_000))
    peaks = [300_000 + sum(stored[:j + 1]) - grads * j + draw(st.integers(0, 20_000)) for j in range(n)]
    head = 290_000 + sum(stored) + draw(st.integers(0, 20_000))
    cost = draw(st.lists(st.integers(1, 1_000_000), min_size=n, max_size=n))
    return LayerTrace(tuple(stored), tuple(inputs), tuple(peaks), head, tuple(cost))


@settings(max_examples=40, deadline=None, derandomize=True)
@given(traces(), st.floats(0.0, 1.0))
def test_dp_is_optimal_against_brute_force_and_uniform_plans(trace, where):
    plans = list(_all_plans(trace.n_layer))
    peaks = {p.segments: predict_peak(trace, p) for p in plans}
    least, most = min(peaks.values()), max(peaks.values())
    assert min_feasible_budget(trace) == least
    budget = int(least + where * (most - least))
    best = optimal_plan(trace, budget)
    assert best.predicted_peak <= budget and predict_peak(trace, best.plan) == best.predicted_peak
    assert best.recompute_flops == recompute_cost(trace, best.plan)
    brute = min(recompute_cost(trace, p) for p in plans if peaks[p.segments] <= budget)
    assert best.recompute_flops == brute
    for p in uniform_plans(trace.n_layer):
        if predict_peak(trace, p) <= budget:
            assert best.recompute_flops <= recompute_cost(trace, p)
