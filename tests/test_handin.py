"""A scripted student through notebook 01, a kernel restart in the middle, the hand-in and the class table.

Also a class folder with one genuine hand-in, one whose summary was edited by hand and one whose
coding answer is the instructor key's seven-line solution: `collect` flags the forgery and counts the
re-run, and accuses no one of copying a solution too short for a match to mean a copy
(:data:`labkit.course.similarity.MIN_NODES`). Costs about 30 s (three sandboxed re-runs).
"""

import csv
import json
import sys
from pathlib import Path

import pytest

from labkit import practice
from labkit.course.collect import COLUMNS, collect
from labkit.course.design_key import find_solution
from labkit.practice import design
from labkit.teach import checks, journal
from labkit.teach.widgets import MemoryPanel

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from instructor.key import REFERENCES  # noqa: E402


def _restart(monkeypatch):
    """What a kernel restart leaves: the journal file, and nothing held in the kernel."""
    checks.reset_attempts()
    monkeypatch.setattr(journal, "SESSION", "restarted")
    monkeypatch.setattr(journal, "_HEADS", {})


def student_states(psi, tp, pp, dp, zero_stage):  # a student's own correct answer, not the key's text
    shard = {"w": 3, "g": 2, "o": 1}
    per = {"w": 2.0, "g": 2.0, "o": 12.0}
    return sum(v / (dp if zero_stage >= shard[k] else 1) for k, v in per.items()) * psi / (tp * pp)


def student_states_wrong(psi, tp, pp, dp, zero_stage):  # forgets that ZeRO shards anything
    return 16.0 * psi / (tp * pp)


def student_bytes(n, precision):  # notebook 01's coding exercise, as a student writes it
    width = 4 if precision == "fp32" else 2
    master = 0 if precision == "fp32" else 4
    return {"parameters": width * n, "gradients": width * n, "optimizer": (8 + master) * n}


def student_bytes_wrong(n, precision):  # ZeRO's 2 + 2 + 12 applied to fp32 too
    return {"parameters": 2 * n, "gradients": 2 * n, "optimizer": 12 * n}


def test_scripted_student_through_notebook_01(tmp_path, monkeypatch):
    monkeypatch.setenv("LABKIT_JOURNAL", str(tmp_path / "ana" / journal.FILENAME))
    key = "01.predict.llama7b_gb"
    assert not checks.reveal_number(50, 108.6e9, "Llama-2 7B needs", key=key)  # wrong, committed
    assert checks.check("01.bytes_per_param", 18).diagnosis  # wrong self-check, diagnosed
    panel = MemoryPanel(model="llama2-7b", gpu="RTX-4090", seq=2048).set_task(design.task("01"))
    solution = find_solution("01")
    panel.set_values(**solution)
    assert panel.check_design()[0]  # met
    _restart(monkeypatch)
    late = checks.reveal_number(108, 108.6e9, "Llama-2 7B needs", key=key)  # right, but after its reveal
    assert late and "not scored" in str(late)
    assert checks.check("01.bytes_per_param", 16)
    panel.set_values(dp=1, zero_stage=0)
    assert not panel.check_design()[0]  # kept exploring: abandoned the met setting
    assert not practice.check_code("01.code.state_bytes", student_bytes_wrong)
    assert practice.check_code("01.code.state_bytes", student_bytes)
    hand = tmp_path / "class" / "ana.json"
    hand.parent.mkdir()
    data = json.loads(checks.export_answers(hand, student="ana").read_text())

    items = data["summary"]["items"]
    assert items[key]["status"] == "wrong" and items[key]["committed"] == 50 and items[key]["after_reveal"] == [108]
    assert items["01.bytes_per_param"] == {"kind": "exercise", "tries": 2, "ever_right": True, "first_right_try": 2,
                                           "last_answer": 16.0}
    assert items["01.design"]["ever_right"] and items["01.design"]["settings"] == panel.settings() | solution
    code = items["01.code.state_bytes"]
    assert code["ever_right"] and code["tries"] == 2 and "def student_bytes(" in code["source"]
    assert data["notebooks"] == ["01"] and data["labkit_version"]
    sessions = {e["session"] for e in data["entries"]}
    assert "restarted" in sessions and len(sessions) == 2
    assert data["summary"]["journal"] == {"lines": len(data["entries"]), "breaks": []}  # the chain held the restart

    rows = collect(tmp_path / "class", unsafe=True)  # the test's own functions: no sandbox needed to trust them
    assert len(rows) == 1 and rows[0]["flags"] == "", rows[0]["flags"]
    with open(tmp_path / "class" / "class.csv") as f:
        table = list(csv.DictReader(f))
    assert tuple(table[0]) == COLUMNS
    row = table[0]
    assert (row["student"], row["predictions_committed"], row["predictions_right"]) == ("ana", "1", "0")
    assert (row["exercises_right"], row["exercises_tries"], row["coding_passed"], row["design_met"]) == \
        ("1", "2", "1", "1")


def _handin(tmp_path, monkeypatch, name: str, fn) -> Path:
    monkeypatch.setenv("LABKIT_JOURNAL", str(tmp_path / name / journal.FILENAME))
    checks.check("09.reason.bubble" if "09.reason.bubble" in checks.EXERCISES else "01.bytes_per_param", 16)
    practice.check_code("09.code.states_per_gpu", fn)
    return checks.export_answers(tmp_path / "class" / f"{name}.json", student=name)


def test_collect_flags_an_edited_summary_and_counts_the_reruns(tmp_path, monkeypatch):
    (tmp_path / "class").mkdir()
    _handin(tmp_path, monkeypatch, "ana", student_states)
    bob = _handin(tmp_path, monkeypatch, "bob", student_states_wrong)
    data = json.loads(bob.read_text())
    data["summary"]["totals"]["coding"]["right"] = 1  # edited by hand: claims the coding exercise passed
    data["summary"]["items"]["09.code.states_per_gpu"]["ever_right"] = True
    bob.write_text(json.dumps(data))
    _handin(tmp_path, monkeypatch, "cy", REFERENCES["09.code.states_per_gpu"])
    (tmp_path / "class" / "notes.json").write_text("[1, 2]")  # not a hand-in: skipped, never run

    rows = {r["student"]: r for r in collect(tmp_path / "class", unsafe=True)}  # the test's own functions
    assert rows["ana"]["flags"] == ""
    assert "summary does not match its journal lines" in rows["bob"]["flags"]
    assert rows["cy"]["flags"] == "" and rows["cy"]["coding_passed"] == 1  # 76 nodes: the natural answer
    assert rows["bob"]["coding_passed"] == 0  # the table counts the re-run, not the edited summary
    assert "SUMMARY_EDITED" in rows["bob"]["flag_codes"] and rows["ana"]["coding_passed"] == 1
    with open(tmp_path / "class" / "class.csv") as f:
        table = list(csv.reader(f))
    assert tuple(table[0]) == COLUMNS and [r[0] for r in table[1:]] == ["ana", "bob", "cy"]  # one row per student
    with open(tmp_path / "class" / "flags.csv") as f:
        flags = list(csv.DictReader(f))
    assert [(f["student"], f["code"]) for f in flags] == [("bob", "SUMMARY_EDITED"), ("bob", "DIGEST")]
    detail = json.loads((tmp_path / "class" / "class.json").read_text())
    assert detail["skipped"] == ["notes.json"] and list(detail["columns"]) == list(COLUMNS)


def test_a_stored_verdict_that_labkit_does_not_give_is_flagged(tmp_path, monkeypatch):
    (tmp_path / "class").mkdir()
    monkeypatch.setenv("LABKIT_JOURNAL", str(tmp_path / "dan" / journal.FILENAME))
    checks.check("01.bytes_per_param", 18)
    lines = (tmp_path / "dan" / journal.FILENAME).read_text().replace('"ok": false', '"ok": true')
    (tmp_path / "dan" / journal.FILENAME).write_text(lines)  # the journal itself edited before export
    checks.export_answers(tmp_path / "class" / "dan.json", student="dan")
    rows = collect(tmp_path / "class", rerun_code=False)
    assert "01.bytes_per_param: stored right for 18" in rows[0]["flags"]
    assert "journal line 1 (01.bytes_per_param, try) was edited" in rows[0]["flags"]


def test_collect_names_a_bad_folder(tmp_path):
    from labkit.errors import LabkitError

    with pytest.raises(LabkitError, match="DIR must be a folder of hand-ins"):
        collect(tmp_path / "nowhere")
    with pytest.raises(LabkitError, match="DIR must hold hand-ins"):
        collect(tmp_path)
