"""The build-it harness without processes: stubs copied once, modules loaded by path, bad input named; the split
check (draw, collect, judge) on an exercise whose collect is plain Python; records read strictly; hints stepping
up one per failed try; op logs and stderr naming where ranks blocked. Cost: well under a second, no process."""

from __future__ import annotations

import json

import pytest
import torch

from labkit.errors import LabkitError
from labkit.practice import CODING, build
from labkit.practice.build import harness


def test_every_build_exercise_is_also_a_coding_exercise_with_a_stub():
    assert {"02.build.zero1", "02.build.onef1b"} <= set(build.BUILDS)
    for key, ex in build.BUILDS.items():
        assert key in CODING and (harness.STUBS / ex.stub).is_file()


def test_bad_input_names_the_field(tmp_path):
    with pytest.raises(LabkitError, match="build exercise"):
        build.open_stub("02.build.nope", tmp_path)
    with pytest.raises(LabkitError, match="folder must be"):
        build.open_stub("02.build.zero1", tmp_path / "missing")
    with pytest.raises(LabkitError, match="path must be"):
        build.check_build("02.build.zero1", tmp_path / "nothing.py")
    with pytest.raises(LabkitError, match="path must be"):
        build.load_module(tmp_path / "notes.txt")


def test_load_module_sees_each_edit(tmp_path):
    path = tmp_path / "m.py"
    path.write_text("X = 1\n")
    assert build.load_module(path).X == 1
    path.write_text("X = 2\n")
    assert build.load_module(path).X == 2


def test_a_copy_is_recognised_whatever_its_docstrings_and_comments():
    a = '"""doc"""\ndef f(x):\n    """say"""\n    return x + 1  # one\n'
    b = "def f(x):\n\n    return x + 1\n"
    assert harness.normal_source(a) == harness.normal_source(b)
    assert harness.normal_source(a) != harness.normal_source(b.replace("+ 1", "+ 2"))
    stub = (harness.STUBS / "zero1.py").read_text()
    assert harness.is_blank("02.build.zero1", stub + "\n# thinking\n")
    assert not harness.is_blank("02.build.zero1", stub.replace('raise NotImplementedError("shard_bounds")', "pass"))


# The split check (draw, collect, judge), without processes: an exercise whose collect is plain Python.
FAKE = "99.build.fake"


@pytest.fixture
def fake(monkeypatch):
    """A build exercise whose collect starts nothing; its judge fails one case with two hint steps."""
    from labkit.practice.coding import Case

    monkeypatch.setitem(build.BUILDS, FAKE, None)  # registered below; removed again after the test
    monkeypatch.setitem(CODING, FAKE, None)
    def judge(record: dict, params: dict) -> list:
        return [Case("c", record.get("x") == params["want"], "", ("h1", "h2"))]

    build.register_build(build.BuildExercise(FAKE, "zero1.py", "task", draw=lambda seed: {"want": seed % 3},
                                             collect=lambda path, p: {"x": 1}, judge=judge, hint=("g",), worked="w"))


def test_params_are_drawn_per_seed_and_hidden_runs_merge_over_them(fake):
    assert build.draw_params(FAKE, 4) == {"want": 1, "seed": 4} == build.draw_params(FAKE, 4)
    assert "seed" in build.draw_params(FAKE)  # a fresh seed when none is given
    table = json.loads(harness.HIDDEN.read_text())
    assert {"02.build.zero1", "02.build.zero2", "02.build.onef1b"} <= set(table)
    base = build.draw_params("02.build.zero1", 1)
    hidden = build.hidden_params("02.build.zero1", base)
    assert hidden and all(h["hidden"] and h["lr"] == base["lr"] and h["worlds"] != base["worlds"] for h in hidden)


def test_a_malformed_or_doubled_record_is_a_failed_case_never_a_crash():
    params = build.draw_params("02.build.zero1", 1)
    for record in ({}, {"runs": "x"}, {"runs": [{"world": 2, "ranks": [{}, {}, {}]}, {}]}, ["not", "a", "dict"]):
        cases = build.judge_record("02.build.zero1", record, params)
        assert len(cases) == 1 and not cases[0].ok and "record" in cases[0].name, cases
    cases = build.judge_record("02.build.onef1b", {"runs": [{"world": 2, "ranks": [{}]}]},
                               build.draw_params("02.build.onef1b", 1))
    assert not cases[0].ok and "well-formed" in cases[0].name


def test_hints_step_up_one_per_failed_try(fake, tmp_path):
    path = tmp_path / "mine.py"
    path.write_text("X = 1\n")
    first, second = str(build.check_build(FAKE, path, seed=2)), str(build.check_build(FAKE, path, seed=2))
    assert "Hint 1: h1" in first and "Hint 2" not in first
    assert "Hint 1: h1" in second and "Hint 2: h2" in second
    assert build.check_build(FAKE, path, seed=4).ok and not build.check_build(FAKE, path, seed=2).ok  # want 1, 2


def test_a_stub_is_not_written_yet_and_not_written_runs_are_found(fake, tmp_path):
    stub = tmp_path / "zero1.py"
    stub.write_text((harness.STUBS / "zero1.py").read_text())
    assert build.collect_record("02.build.zero1", stub, {})["failure"]["kind"] == "not_written"
    assert harness.not_written({"runs": [{"world": 2}, {"failure": {"kind": "not_written", "message": "m"}}]}) == "m"
    assert harness.not_written({"runs": [{"failure": {"kind": "raised", "message": "m"}}]}) == ""


def test_op_logs_and_stderr_name_where_ranks_blocked(tmp_path):
    from labkit.practice.build import diagnosis as dg
    from labkit.practice.build import records

    log = records.OpLog(tmp_path, 0)
    log.end(log.start("isend", 1, 64))
    log.start("recv", 1, 64)
    log.note("inner_numel", 268)
    log.file.close()
    ops = records.read_ops(tmp_path / "rank0.ops")
    assert [op[:3] for op in ops] == [["isend", 1, 64], ["recv", 1, 64]] and ops[1][4] is None
    assert records.read_notes(tmp_path / "rank0.ops") == {"inner_numel": 268}
    both = {"failure": {"kind": "timeout", "message": "hung"}, "ops": [ops, [["recv", 0, 64, 0.0, None]]]}
    assert dg.RECV_RECV in dg.failure_case(both, "runs").detail
    sends = {"failure": {"kind": "timeout", "message": "hung"}, "ops": [[["send", 1, 4, 0.0, None]],
                                                                         [["send", 0, 4, 0.0, None]]]}
    assert dg.SEND_SEND in dg.failure_case(sends, "runs").detail
    aborted = {"failure": {"kind": "died", "message": "rank 0 failed: exited with code -6"}, "ops": [[], []],
               "stderr": ["  what():  [enforce fail at pair.cc:456] 8 vs 4. Is there a distributed collective "
                          "mismatch in your code?\n", ""]}
    detail = dg.failure_case(aborted, "runs").detail
    assert dg.MISMATCH in detail and 'torch says: "8 vs 4. Is there a distributed collective mismatch' in detail
    with pytest.raises(dg.BadRecord, match="shape"):
        dg.tensor({"t": torch.zeros(3)}, "t", (4,))
    with pytest.raises(dg.BadRecord, match="must be int"):
        dg.field({"n": True}, "n", int)


def test_judge_record_leaves_the_callers_random_stream_as_it_was(monkeypatch):
    """The judges seed torch's RNG for their references; the harness forks it once for all of them."""
    import dataclasses

    import torch

    from labkit.practice.build import harness

    key = next(iter(harness.BUILDS))
    reseeding = dataclasses.replace(harness.BUILDS[key], judge=lambda record, params: torch.manual_seed(0) and [])
    monkeypatch.setitem(harness.BUILDS, key, reseeding)
    torch.manual_seed(1234)
    before = torch.get_rng_state()
    assert harness.judge_record(key, {}, {}) == []
    assert torch.equal(torch.get_rng_state(), before)
