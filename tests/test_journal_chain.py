"""The journal's hash chain: a line deleted, moved or edited before export is found, per notebook and per student.

Also what the chain cannot see, stated as tests: lines cut from the end of the file after a restart
(nothing of the deleted lines survives anywhere), and journals written before the chain (reported as
unchained, never as intact).
"""

import json

import pytest

from labkit.course.collect import collect
from labkit.teach import checks, journal


@pytest.fixture
def jpath(tmp_path, monkeypatch):
    where = tmp_path / "nb" / journal.FILENAME
    monkeypatch.setenv(journal.ENV, str(where))
    monkeypatch.setattr(journal, "_HEADS", {})
    return where


def _write_some(n: int = 4) -> None:
    for i in range(n):
        journal.record("exercise", "01.bytes_per_param", 10 + i, i == n - 1)
        journal.record("exercise", "02.some_check", 20 + i, False)  # another notebook, interleaved


def _lines(where) -> list[str]:
    return where.read_text().splitlines()


def test_an_untouched_journal_verifies_and_each_notebook_is_its_own_chain(jpath):
    _write_some()
    entries = journal.entries()
    assert journal.verify(entries) == []
    assert all(e.chain and e.chain == journal.digest_of(e) for e in entries)
    assert entries[0].prev == "" and entries[1].prev == ""  # each notebook's first line starts a chain
    assert journal.verify([e for e in entries if e.notebook == "02"]) == []  # a one-notebook hand-in holds its chain


@pytest.mark.parametrize("tamper,expected", [
    (lambda ls: ls[:2] + ls[4:], "notebook 01: a journal line is missing or moved before line 3"),  # deleted
    (lambda ls: [ls[2], *ls[:2], *ls[3:]], "a journal line is missing or moved"),  # reordered
    (lambda ls: [ls[0].replace('"ok": false', '"ok": true'), *ls[1:]], "journal line 1 (01.bytes_per_param, try) "
                                                                       "was edited"),
    (lambda ls: ls[1:], "notebook 01: a journal line is missing or moved before line 2"),  # the first line deleted
])
def test_a_deleted_moved_or_edited_line_breaks_the_chain(jpath, tamper, expected):
    _write_some()
    jpath.write_text("\n".join(tamper(_lines(jpath))) + "\n")
    breaks = journal.verify(journal.entries())
    assert any(expected in b for b in breaks), breaks


def test_the_chain_survives_a_restart(jpath, monkeypatch):
    _write_some(2)
    monkeypatch.setattr(journal, "_HEADS", {})  # a new kernel: only the file remains
    monkeypatch.setattr(journal, "SESSION", "restarted")
    _write_some(2)
    entries = journal.entries()
    assert journal.verify(entries) == [] and {e.session for e in entries} >= {"restarted"}


def test_deleting_ones_last_tries_and_carrying_on_shows_in_the_same_kernel(jpath):
    _write_some(2)
    jpath.write_text("\n".join(_lines(jpath)[:-2]) + "\n")  # the last 01 and 02 lines removed
    journal.record("exercise", "01.bytes_per_param", 16, True)
    assert any("notebook 01: a journal line is missing" in b for b in journal.verify(journal.entries()))


def test_the_limit_lines_cut_from_the_end_before_a_restart_cannot_be_seen(jpath, monkeypatch):
    """Nothing of a cut tail survives on the student's machine: the chain is evidence, not proof."""
    _write_some(2)
    jpath.write_text("\n".join(_lines(jpath)[:-2]) + "\n")
    monkeypatch.setattr(journal, "_HEADS", {})
    journal.record("exercise", "01.bytes_per_param", 16, True)
    assert journal.verify(journal.entries()) == []


def test_a_torn_last_line_is_ended_not_glued_onto(jpath):
    _write_some(1)
    with open(jpath, "a") as f:
        f.write('{"kind": "exercise", "key": "01.by')  # a kernel killed mid-write
    journal.record("exercise", "01.bytes_per_param", 16, True)
    entries = journal.entries()
    assert len(entries) == 3 and entries[-1].answer == 16 and journal.verify(entries) == []


def test_an_old_journal_without_a_chain_loads_and_is_reported_unchained(jpath):
    _write_some(2)
    old = [{k: v for k, v in json.loads(line).items() if k not in ("prev", "chain")} for line in _lines(jpath)]
    jpath.write_text("".join(json.dumps(x) + "\n" for x in old))
    entries = journal.entries()
    assert len(entries) == 4
    breaks = journal.verify(entries)
    assert breaks == [f"notebook {n}: 2 journal lines carry no chain (written before labkit chained its journal, or "
                      "the chain was stripped): deleted lines cannot be detected" for n in ("01", "02")]


def test_collect_flags_the_student_whose_journal_lost_a_line(tmp_path, monkeypatch):
    (tmp_path / "class").mkdir()
    for name in ("ana", "bob"):
        where = tmp_path / name / journal.FILENAME
        monkeypatch.setenv(journal.ENV, str(where))
        monkeypatch.setattr(journal, "_HEADS", {})
        checks.reset_attempts()
        for guess in (18, 20, 16):
            checks.check("01.bytes_per_param", guess)
        if name == "bob":  # deletes his two wrong tries before exporting
            where.write_text(where.read_text().splitlines()[-1] + "\n")
        data = json.loads(checks.export_answers(tmp_path / "class" / f"{name}.json", student=name).read_text())
        assert bool(data["summary"]["journal"]["breaks"]) == (name == "bob")
    rows = {r["student"]: r for r in collect(tmp_path / "class", rerun_code=False)}
    assert rows["ana"]["flags"] == ""
    assert "bob.json: notebook 01: a journal line is missing or moved before line 1" in rows["bob"]["flags"]


def test_a_handin_exported_before_the_chain_is_not_called_edited(tmp_path, monkeypatch):
    (tmp_path / "class").mkdir()
    monkeypatch.setenv(journal.ENV, str(tmp_path / "old" / journal.FILENAME))
    checks.check("01.bytes_per_param", 16)
    hand = checks.export_answers(tmp_path / "class" / "old.json", student="old")
    data = json.loads(hand.read_text())
    from labkit.teach import handin

    data["entries"] = [{k: v for k, v in e.items() if k not in ("prev", "chain")} for e in data["entries"]]
    del data["summary"]["journal"]  # what labkit wrote before the chain
    data["digest"] = handin.digest(data["entries"], data["summary"])
    hand.write_text(json.dumps(data))
    (row,) = collect(tmp_path / "class", rerun_code=False)
    assert "summary does not match" not in row["flags"] and "carry no chain" in row["flags"]
