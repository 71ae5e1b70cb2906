"""Issue 20's acceptance, the remaining items: 09's capstone in the hand-in and re-graded by collect;
``export_answers("x.txt")`` one clear line."""

import json
from dataclasses import asdict

import pytest

from labkit.advisor import capstone
from labkit.course.collect import collect
from labkit.errors import LabkitError
from labkit.teach import checks, journal


def test_the_capstone_is_recorded_exported_and_regraded(tmp_path, monkeypatch):
    (tmp_path / "class").mkdir()
    monkeypatch.setenv(journal.ENV, str(tmp_path / "eve" / journal.FILENAME))
    best = asdict(capstone.best_plan().layout)  # the advisor's best plan: within budget by construction
    grades = [capstone.grade(p) for p in ({"dp": 1024, "tp": 1, "pp": 1}, best)]
    assert [bool(g) for g in grades] == [False, True]
    data = json.loads(checks.export_answers(tmp_path / "class" / "eve.json", student="eve").read_text())
    item = data["summary"]["items"]["09.capstone"]
    assert item["kind"] == "capstone" and item["tries"] == 2 and item["ever_right"] and item["first_right_try"] == 2
    assert item["settings"] == json.loads(json.dumps(best))  # the layout that met it, stored as settings
    (row,) = collect(tmp_path / "class", rerun_code=False)
    assert row["flags"] == "" and row["capstone_met"] == 1


def test_a_capstone_stored_as_met_that_the_advisor_rejects_is_flagged(tmp_path, monkeypatch):
    (tmp_path / "class").mkdir()
    where = tmp_path / "fay" / journal.FILENAME
    monkeypatch.setenv(journal.ENV, str(where))
    assert not capstone.grade({"dp": 1024, "tp": 1, "pp": 1})  # GPT-3 175B without model parallelism: no fit
    where.write_text(where.read_text().replace('"ok": false', '"ok": true'))
    checks.export_answers(tmp_path / "class" / "fay.json", student="fay")
    (row,) = collect(tmp_path / "class", rerun_code=False)
    assert "09.capstone" in row["flags"] and "was edited" in row["flags"]


def test_export_answers_to_a_txt_path_is_one_clear_line(tmp_path):
    with pytest.raises(LabkitError) as err:
        checks.export_answers(tmp_path / "x.txt")
    assert "\n" not in str(err.value) and "path must end in .json" in str(err.value) and "x.txt" in str(err.value)
