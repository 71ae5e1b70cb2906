"""02.build.zero2 on real ranks: the reference passes on 2 and 4 ranks (and the hidden 3), the stub is "not
written yet" without processes, and ZeRO-2's own bugs (named edits of the reference, tests/build_mutate.py) fail
with their own names. The bugs ZeRO-2 shares with ZeRO-1 (sum, ignored arguments, ...) are judged by the same
code (labkit.practice.build.zero_judge) and tested in test_build_zero1.py.

Cost: about 3 s on two loaded cores with the forkserver's preload (records._preload), about 25 s without it;
the mutants run on 2 ranks only.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from build_mutate import mutant

from labkit.practice import build
from labkit.practice.build import records, zero2
from labkit.practice.build.feedback import feedback
from labkit.practice.build.zero_diagnose import BUGS

ROOT = Path(__file__).resolve().parent.parent
SEED = 11
MUTATIONS = {
    "full_grads": [("        p.grad = None\n", "")],
    "wrong_owner": [("dist.reduce(piece, dst=owner)", "dist.reduce(piece, dst=0)")],
    "accumulated": [("        self.shard.grad.zero_()\n", "")],
    "sum": [("        self.shard.grad /= self.world_size\n", "")],
}


@pytest.mark.procs
def test_reference_passes_visible_and_hidden_runs():
    fb = build.check_build(zero2.KEY, ROOT / "instructor" / "build" / "zero2.py", seed=SEED, hidden=True)
    assert fb.ok, str(fb)
    assert "no full gradient held after backward" in str(fb) and "hidden 1: 3 ranks" in str(fb)


def test_blank_stub_is_not_written_yet_without_processes(tmp_path, monkeypatch):
    monkeypatch.setattr(records, "ranks", lambda *a, **k: pytest.fail("a blank stub started processes"))
    fb = build.check_build(zero2.KEY, build.open_stub(zero2.KEY, tmp_path))
    assert not fb.ok and str(fb).startswith("Not written yet")


@pytest.mark.procs
@pytest.mark.parametrize("bug", sorted(MUTATIONS))
def test_each_zero2_bug_fails_with_its_own_name(bug, tmp_path):
    params = {**build.draw_params(zero2.KEY, SEED), "worlds": [2]}
    record = build.collect_record(zero2.KEY, mutant(tmp_path, "zero2.py", *MUTATIONS[bug]), params)
    cases = build.judge_record(zero2.KEY, record, params)
    text = "\n".join(f"{c.name}: {c.detail}" for c in cases if not c.ok)
    assert BUGS[bug][0] in text, text
    assert not [n for k, (n, _) in BUGS.items() if k != bug and n in text], text
    assert f"Hint 1: {BUGS[bug][1][0]}" in str(feedback(zero2.KEY, cases))
