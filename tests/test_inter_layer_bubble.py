"""The pipeline bubble measured, replayed (from stage times taken alone, and as run), and by formula.

Cost: about 4 s (one 2-rank group of four tiny runs, then their stages timed alone).
"""

from __future__ import annotations

import pytest

from labkit.errors import LabkitError
from labkit.inter_layer import bubble, report
from labkit.sim import Action, bubble_fraction, measured_bubble, replay_schedule, schedule

TINY = {"n_layer": 4, "n_head": 2, "d_model": 32, "seq_len": 32, "dropout": 0.0}


@pytest.fixture(scope="module")
def results() -> list[bubble.BubbleResult]:
    return bubble.measure(2, (("gpipe", 2, 1), ("gpipe", 4, 1), ("1f1b", 4, 1), ("interleaved", 4, 2)), repeats=2,
                          model=TINY, batch_size=8)


def test_measured_is_never_below_the_replay_of_its_own_durations(results):
    """Every action started no earlier than the replay allows: same order, same durations (module docstring)."""
    for r in results:
        assert len(r.measured) == len(r.as_run) == 2
        assert all(0 <= rep <= meas + 1e-9 < 1 for meas, rep in zip(r.measured, r.as_run, strict=True)), r.label
        assert r.formula == bubble_fraction(r.p, r.m, r.v)
        assert [(rec.measured, rec.predicted) for rec in r.records] == [(m, r.formula) for m in r.measured]
        measured, replayed = r.timelines
        assert sorted(e.name for e in measured.events) == sorted(e.name for e in replayed.events)
        assert replayed.makespan <= measured.makespan + 1e-9


def test_the_replayed_column_comes_from_stage_times_taken_alone_and_pooled_by_m_and_v(results):
    """Each round of stage timings gives one replay; GPipe and 1F1B at the same m share their rounds (issue 40)."""
    gpipe2, gpipe4, onef1b4, inter = results
    assert len(gpipe2.replayed) == bubble.op_rounds(2) and len(inter.replayed) == bubble.op_rounds(4)
    assert len(gpipe4.replayed) == len(onef1b4.replayed) == 2 * bubble.op_rounds(4)  # pooled
    assert all(0 < r.replayed_best < 1 and all(0 < x < 1 for x in r.replayed) for r in results)
    equal = {(s, ph): 1.0 if ph == "F" else 2.0 for s in range(4) for ph in "FB"}
    for kind, m, v in (("gpipe", 4, 1), ("1f1b", 4, 1), ("interleaved", 4, 2)):  # equal stages: the formula
        assert measured_bubble(bubble.replay_ops(kind, 2, m, v, equal)) == pytest.approx(bubble_fraction(2, m, v))


def test_trends_are_read_from_the_replayed_column():
    def res(kind, m, v, best):
        return bubble.BubbleResult("x", kind, 2, m, v, bubble_fraction(2, m, v), [0.5], [best], best, [0.4], [1.0],
                                   [1.0])
    good = [res("gpipe", 1, 1, 0.5), res("gpipe", 8, 1, 0.12), res("1f1b", 8, 1, 0.11), res("interleaved", 8, 2, 0.07)]
    assert all(bubble.trends(good).values()) and len(bubble.trends(good)) == 3
    bad = [res("gpipe", 1, 1, 0.5), res("gpipe", 8, 1, 0.13), res("1f1b", 8, 1, 0.15), res("interleaved", 8, 2, 0.17)]
    assert bubble.trends(bad) == {"GPipe's bubble falls as m grows": True, "interleaved v=2 m=8 below 1F1B m=8": False,
                                  "GPipe m=8 within 2 points of 1F1B m=8": True}  # issue 40's Run All: 13, 15, 17%
    assert not bubble.trends([res("gpipe", 1, 1, 0.5), res("gpipe", 8, 1, 0.6)])["GPipe's bubble falls as m grows"]


def test_replay_keeps_each_measured_duration(results):
    measured, replayed = results[2].timelines
    took = {e.name: e.duration for e in measured.events}
    assert all(e.duration == pytest.approx(took[e.name], abs=1e-9) for e in replayed.events)


def test_equal_stage_simulation_is_the_formula_for_gpipe_and_1f1b():
    for kind in ("gpipe", "1f1b"):
        for m in (2, 4, 8):
            assert bubble.simulated(kind, 2, m) == pytest.approx(bubble_fraction(2, m))


def test_replay_with_equal_durations_is_the_formula():
    order = schedule("1f1b", 4, 8)
    durations = {a: 1.0 if a.phase == "F" else 2.0 for acts in order.values() for a in acts}
    assert measured_bubble(replay_schedule(order, 4, durations)) == pytest.approx(bubble_fraction(4, 8))


def test_replay_names_a_missing_action():
    order = schedule("gpipe", 2, 2)
    with pytest.raises(LabkitError, match="durations must give every action"):
        replay_schedule(order, 2, {Action(0, "F", 0): 1.0})


def test_tables_say_their_units(results):
    table = bubble.table(results)
    assert "replayed" in table and "measured" in table and " ms" in table
    assert "(p-1)/(v*m+p-1)" in report.bubble_formula_table([("gpipe", 2, 4, 1)])


def test_bad_repeats_are_refused():
    with pytest.raises(LabkitError, match="repeats"):
        bubble.measure(2, repeats=0)
