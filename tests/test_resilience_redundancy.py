"""Redundant computation (Bamboo), simulated: the step with RC, the step after a failover, and goodput."""

from __future__ import annotations

import math

import pytest

from labkit.errors import LabkitError
from labkit.resilience import redundancy as rc
from labkit.resilience.interval import cluster_mtbf_s
from labkit.sim import Action, simulate_pipeline

GRID = [(k, p, m) for k in rc.KINDS for p, m in ((2, 2), (2, 6), (4, 4), (4, 8), (4, 16), (8, 8), (8, 24))]


@pytest.mark.parametrize("kind, p, m", GRID)
def test_plain_step_is_labkit_sims_pipeline(kind, p, m):
    plain = rc.rc_step(kind, p, m, 1.0, 2.0, placement="none")
    assert plain.step_s == simulate_pipeline(kind, p, m, 1.0, 2.0).makespan == plain.plain_s
    assert plain.overhead == 0 and not [e for e in plain.timeline.events if e.kind == "R"]


@pytest.mark.parametrize("kind, p, m", GRID)
def test_each_rank_runs_its_successors_forward_after_the_input_exists(kind, p, m):
    step = rc.rc_step(kind, p, m)
    ends = {e.name: e.end for e in step.timeline.events}
    for r in range(p):
        rs = [e for e in step.timeline.on(f"rank {r}") if e.kind == "R"]
        assert sorted(e.meta["microbatch"] for e in rs) == list(range(m))
        assert {e.meta["stage"] for e in rs} == {(r + 1) % p}
        if r < p - 1:  # stage 0's replica (on the last rank) reads tokens, the others need F(r, i)
            assert all(e.start >= ends[str(Action(r, "F", e.meta["microbatch"]))] for e in rs)


@pytest.mark.parametrize("kind, p, m", GRID)
def test_bubble_placement_costs_at_least_the_work_beyond_the_bubble_and_at_most_eager(kind, p, m):
    bubble, eager = rc.rc_step(kind, p, m), rc.rc_step(kind, p, m, placement="eager")
    floor = max(0.0, m * 1.0 - (p - 1) * (1.0 + 2.0))  # redundant work per rank minus its idle time
    assert bubble.step_s >= bubble.plain_s + floor - 1e-9
    assert bubble.step_s <= eager.step_s and eager.overhead > 0
    fits = rc.bubble_capacity(p, m) >= 1
    assert (bubble.overhead == 0) == (sum(bubble.in_bubble) == p * m)
    if not fits:
        assert bubble.overhead > 0


def test_rc_is_free_while_the_bubble_holds_it_and_costs_once_m_outgrows_it():
    rows = {m: rc.rc_step("1f1b", 4, m) for m in (4, 8, 16)}
    assert rows[4].overhead == 0 and rc.bubble_capacity(4, 4) == 2.25
    assert 0 < rows[8].overhead < rows[16].overhead  # capacity 1.125: enough idle time, not all of it usable
    assert rows[16].overhead == pytest.approx(9 / 57)  # simulated: step 66 against 57
    assert rows[16].overhead >= (16 - 9) / 57  # the bound m t_f - (p-1)(t_f+t_b) over the plain step


def test_redundant_activations_held_are_bounded_and_1f1b_holds_fewer():
    gpipe, f1b = rc.rc_step("gpipe", 4, 8, placement="eager"), rc.rc_step("1f1b", 4, 8, placement="eager")
    assert gpipe.held == (8, 8, 8, 8)  # every forward before any backward: all m held
    assert max(f1b.held) <= 4 and f1b.held[:3] == (4, 3, 2)  # like 1F1B's own p - r
    assert rc.rc_memory_bytes(100.0, 10.0, 4) == 140.0


@pytest.mark.parametrize("kind, p, m", GRID)
def test_failover_merges_the_lost_stage_into_its_predecessor(kind, p, m):
    fail = 1 % p
    tl = rc.failover_step(kind, p, m, failed=fail)
    holder = tl.on(f"rank {fail - 1}")
    assert f"rank {fail}" not in tl.streams
    assert sorted((e.meta["stage"], e.kind) for e in holder) == sorted(
        [(s, k) for s in (fail - 1, fail) for k in "FB" for _ in range(m)])
    plain = simulate_pipeline(kind, p, m, 1.0, 2.0).makespan
    assert tl.makespan >= max(plain, 2 * m * 3.0) and tl.makespan > plain


def test_goodput_of_rc_by_hand():
    m = cluster_mtbf_s(4.74e-4, 16384)
    g = rc.goodput_redundant(0.05, 1.5, 60.0, 3600.0, 4.74e-4, 16384)
    assert g.mtbf_s == m
    assert g.goodput == pytest.approx(0.95 * (1 - 3660 / m) + 3600 / m / 1.5)
    assert g.double_failures_per_day == pytest.approx(86400 / m * -math.expm1(-4.74e-4 * 3660 / 86400))
    assert g.double_failures_per_day < 1e-3 * 86400 / m  # rare beside the failures RC survives
    assert g.lost_gpu_hours_per_day(16384) == pytest.approx((1 - g.goodput) * 16384 * 24)
    assert rc.goodput_redundant(0.0, 1.0, 0.0, 0.0, 1e-3, 8).goodput == 1.0
    worse = rc.goodput_redundant(0.05, 1.5, 60.0, 3600.0, 4.74e-4, 32768)
    assert worse.goodput < g.goodput


@pytest.mark.parametrize("call, message", [
    (lambda: rc.rc_step("1f1b", 1, 4), "p must be at least 2"),
    (lambda: rc.rc_step("interleaved", 4, 4), "kind must be one of gpipe, 1f1b"),
    (lambda: rc.rc_step("1f1b", 4, 2), "m must be >= p"),
    (lambda: rc.rc_step("gpipe", 4, 4, placement="lazy"), "placement must be one of none, eager, bubble"),
    (lambda: rc.rc_step("gpipe", 4, 4, t_fwd=0.0), "t_fwd must be a positive number"),
    (lambda: rc.failover_step("gpipe", 4, 4, failed=4), "failed must be a stage in 0..3"),
    (lambda: rc.goodput_redundant(1.0, 1.5, 0, 0, 1e-3, 8), "overhead must be in"),
    (lambda: rc.goodput_redundant(0.1, 1.5, -1, 0, 1e-3, 8), "failover_s and replace_s"),
    (lambda: rc.goodput_redundant(0.1, 1.5, 0, 0, 1e-3, 0), "n_gpus must be a positive integer"),
    (lambda: rc.rc_memory_bytes(-1, 0, 0), "must be >= 0"),
])  # fmt: skip
def test_bad_input_names_the_field(call, message):
    with pytest.raises(LabkitError, match=message):
        call()
