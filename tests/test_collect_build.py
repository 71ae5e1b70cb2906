"""collect re-grades a build-it hand-in on real process groups in its sandbox, and flags the key's own module."""

from __future__ import annotations

import json
from pathlib import Path

from build_mutate import mutant

from labkit.course import regrade_code, sandbox
from labkit.course.collect import collect
from labkit.practice import build
from labkit.practice.build import zero1
from labkit.teach import handin

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = ROOT / "instructor" / "build" / "zero1.py"
# These modules are the test's own (the key's and an honest edit of it): where no sandbox starts on a machine,
# the same re-grade runs unsandboxed, so the verdicts are still checked (tests/test_sandbox*.py test the sandbox).
UNSAFE = not sandbox.available()[0]


def _learners_module() -> str:
    """A ZeRO-1 written differently from the key (another average, another write-back): the same verdict."""
    src = REFERENCE.read_text()
    src = src.replace("self.shard.grad = mine / self.world_size", "mine.div_(self.world_size)\n"
                      "        self.shard.grad = mine")
    src = src.replace("offset += p.numel()", "offset = offset + p.numel()")
    assert src != REFERENCE.read_text()
    return src


def _hand_in(tmp: Path, name: str, source: str, monkeypatch) -> Path:
    monkeypatch.setenv("LABKIT_JOURNAL", str(tmp / f"{name}-journal.jsonl"))
    (tmp / name).mkdir()
    path = build.open_stub(zero1.KEY, tmp / name)
    path.write_text(source)
    assert build.check_build(zero1.KEY, path).ok
    out = tmp / "handins" / f"{name}.json"
    out.parent.mkdir(exist_ok=True)
    return handin.export_answers(out, student=name)


def test_collect_regrades_a_zero1_handin_and_flags_the_keys_module(tmp_path, monkeypatch):
    _hand_in(tmp_path, "alice", _learners_module(), monkeypatch)
    _hand_in(tmp_path, "bob", REFERENCE.read_text(), monkeypatch)
    item = json.loads((tmp_path / "handins" / "alice.json").read_text())["summary"]["items"][zero1.KEY]
    assert item["source"] == _learners_module() and item["path"].endswith("alice/build/zero1.py")
    rows = {r["student"]: r for r in collect(tmp_path / "handins", timeout_s=150, unsafe=UNSAFE)}
    assert rows["alice"]["coding_passed"] == 1 and rows["alice"]["flags"] == "", rows["alice"]["flags"]
    assert "KEY_COPY" in rows["bob"]["flag_codes"] and "the instructor key's solution" in rows["bob"]["flags"]
    assert "could not be re-run" not in rows["bob"]["flags"] and "re-run fails" not in rows["bob"]["flags"]


def test_a_stored_pass_of_a_wrong_module_is_caught_by_the_rerun(tmp_path):
    sum_not_mean = ("self.shard.grad = mine / self.world_size", "self.shard.grad = mine")
    wrong = mutant(tmp_path, "zero1.py", sum_not_mean).read_text()
    summary = {"items": {zero1.KEY: {"kind": "coding", "tries": 1, "ever_right": True, "function": "zero1.py",
                                     "source": wrong}}}
    flags, verdicts = regrade_code.coding_flags(summary, timeout_s=150, unsafe=UNSAFE)
    assert verdicts == {zero1.KEY: False}
    assert any("stored passing, re-run fails" in str(f) for f in flags), flags


def test_the_key_lists_the_build_exercises():
    from labkit.course.key import answer_key

    assert "02.build.zero1: reference solution in instructor/build/zero1.py" in answer_key(designs=False)
