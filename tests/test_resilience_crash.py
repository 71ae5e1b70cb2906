"""Real SIGKILLs: killed during steps and during saves, restarted, and bit-identical to a run never killed."""

from __future__ import annotations

import pytest

from labkit.errors import LabkitError
from labkit.resilience.crash import (
    KillPoint,
    crash_and_resume,
    crash_group,
    judge,
    kill_points,
    kill_sweep,
    launch_worker,
    reference_run,
)

STEPS, EVERY = 8, 2


def _expected_lost(k: KillPoint) -> int:
    """A kill during step s loses the steps since the last save; a kill inside a save loses the whole interval."""
    return k.step % EVERY if k.phase == "step" else EVERY


def test_kill_points_are_seeded_distinct_and_cover_steps_and_saves():
    pts = kill_points(10, STEPS, EVERY, seed=0)
    assert pts == kill_points(10, STEPS, EVERY, seed=0) and len(set(pts)) == 10
    assert {p.phase for p in pts} >= {"step"} and {p.phase for p in pts} & {"written", "manifest"}
    with pytest.raises(LabkitError, match="n must be at most 16"):
        kill_points(17, STEPS, EVERY)


def test_ten_random_kills_all_resume_bit_identical(tmp_path):
    sweep = kill_sweep(tmp_path, n=10, steps=STEPS, every=EVERY, seed=0)
    assert len(sweep.outcomes) == 10 and sweep.all_ok
    for o in sweep.outcomes:
        assert o.killed and o.losses_identical and o.params_identical and o.state_identical and o.tmp_cleaned
        assert o.steps_lost == _expected_lost(o.kill)
        assert o.resumed_from == o.kill.step - o.steps_lost
        in_save = o.kill.phase != "step"
        assert [r[0] for r in o.rejected] == ([f"step_{o.kill.step:08d}.tmp"] if in_save else [])
    assert all(t.seconds_lost >= 0 and t.restart_s > 0 for t in sweep.timings)
    assert sweep.table().count("yes") == 20 and "NO" not in sweep.table()


def test_a_kill_from_the_parent_and_one_through_the_command_line(tmp_path):
    """The parent SIGKILLs when the log says a save began (lands wherever it lands); then the real CLI is killed."""
    ref = reference_run(tmp_path / "ref", 4, EVERY)
    outcome, _ = crash_and_resume(tmp_path / "parent", ref, KillPoint(2, "written"), EVERY, killer="parent")
    assert outcome.ok and outcome.tmp_cleaned and outcome.resumed_from in (0, 2)
    run = tmp_path / "cli"
    code = launch_worker(run, 4, EVERY, kill=KillPoint(3), launcher="subprocess")
    launch_worker(run, 4, EVERY)
    cli, _ = judge(run, ref, KillPoint(3), code == -9, 0.0)
    assert code == -9 and cli.ok and (cli.resumed_from, cli.steps_lost) == (2, 1)


def test_killing_one_rank_of_a_gloo_group_fails_cleanly_and_resumes_bit_identical(tmp_path):
    res = crash_group(tmp_path, steps=6, every=2, kill=KillPoint(3), kill_rank=1, timeout=60)
    assert res.failed_rank == 1 and "exited with code -9" in res.failure and res.failed_cleanly
    o = res.outcome
    assert o.killed and o.resumed_from == 2 and o.steps_lost == 1
    assert o.losses_identical and o.params_identical and o.state_identical and o.tmp_cleaned
