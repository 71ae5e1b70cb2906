"""The gradebook counts what collect re-graded, never what a hand-in claims (issue 37), and survives hostile files.

A class of honest, forged, doubled, malformed, copied and late hand-ins, written through the real journal and
export, collected once (module fixture) with the sandbox replaced by a stand-in whose verdicts the test sets:
this file tests what collect does with the sandbox's replies (a forged ``ok: true``, a failing re-run, two
replies, none), not the sandbox itself (tests/test_sandbox*.py and tests/test_collect_build.py run the real
one). No real process: about 10 s, most of it importing the topics' exercises.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from labkit.course import collect as collect_mod
from labkit.course import regrade, regrade_code, similarity
from labkit.course.sandbox import Rerun
from labkit.teach import checks, handin, journal

ROOT = Path(__file__).resolve().parent.parent
KEY_MODULE = (ROOT / "instructor" / "build" / "zero1.py").read_text()
ONE_LINER = "def mlp_shards(w1, w2, rank, t):\n    return w1.chunk(t, dim=0)[rank], w2.chunk(t, dim=1)[rank]\n"
RIGHT_SOURCE = "def states_per_gpu(psi, tp, pp, dp, zero_stage):\n    return 16 * psi  # PASSES in the stand-in\n"
WRONG_SOURCE = "def states_per_gpu(psi, tp, pp, dp, zero_stage):\n    return 0  # FAILS in the stand-in\n"


def renamed_key() -> str:
    """The key's ZeRO-1 module with three names changed and its docstring edited: a copy all the same."""
    src = KEY_MODULE.replace("padded", "total").replace("mine", "part").replace("offset", "at")
    return src.replace("Reference solution of", "My own solution of", 1)


def stand_in(items: list[dict], timeout_s: float = 120.0, **_: object) -> list[Rerun]:
    """The sandbox's replies as the test sets them: PASSES passes, FAILS fails, TWICE gets two replies (pass and
    fail), NOREPLY none, anything else fails; a reply for a key nobody asked for is added."""
    out = []
    for i in items:
        src = i["source"]
        if "NOREPLY" in src:
            continue
        if "TWICE" in src:
            out += [Rerun(i["key"], True, "All 3 tests pass."), Rerun(i["key"], False, "1 of 3 tests fail.")]
            continue
        out.append(Rerun(i["key"], "PASSES" in src or "chunk" in src or "Zero1AdamW" in src,
                         "All tests pass." if "PASSES" in src else "2 of 10 tests fail."))
    return [*out, Rerun("09.code.not_asked", True, "forged")]


def _code_try(key: str, source: str, ok: bool) -> None:
    journal.record("coding", key, "fn" if ".code." in key else "module.py", ok, source=source)


def _export(folder: Path, name: str) -> Path:
    return handin.export_answers(folder / f"{name}.json", student=name)


def _student(tmp: Path, monkeypatch, name: str, work) -> Path:
    monkeypatch.setenv(journal.ENV, str(tmp / "journals" / name / journal.FILENAME))
    monkeypatch.setattr(journal, "_HEADS", {})
    checks.reset_attempts()
    work()
    return _export(tmp / "class", name)


@pytest.fixture(scope="module")
def book(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("gradebook")
    (tmp / "class").mkdir()
    mp = pytest.MonkeyPatch()
    mp.setattr(regrade_code, "run_submissions", stand_in)
    try:
        _student(tmp, mp, "ana", lambda: (checks.check("01.bytes_per_param", 18),
                                          checks.check("01.bytes_per_param", 16),
                                          checks.reveal_number(16, 16, "B", "", 1, key="05.predict.mixed_bytes"),
                                          _code_try("09.code.states_per_gpu", RIGHT_SOURCE, True)))
        bob = _student(tmp, mp, "bob", lambda: _code_try("09.code.states_per_gpu", WRONG_SOURCE, True))  # forged ok
        data = json.loads(bob.read_text())
        data["summary"]["totals"]["exercise"]["right"] = 5  # and a summary edited by hand
        bob.write_text(json.dumps(data))
        _student(tmp, mp, "cy", lambda: _code_try("09.code.states_per_gpu", RIGHT_SOURCE + "# TWICE\n", True))
        _student(tmp, mp, "dan", lambda: _code_try("09.code.states_per_gpu", RIGHT_SOURCE + "# NOREPLY\n", True))
        _student(tmp, mp, "eve", lambda: (checks.reveal_number(None, 16, "B", "", 1, key="05.predict.mixed_bytes"),
                                          checks.reveal_number(16, 16, "B", "", 1, key="05.predict.mixed_bytes")))
        _student(tmp, mp, "fay", lambda: _code_try("02.build.zero1", renamed_key(), True))
        _student(tmp, mp, "gus", lambda: _code_try("03.code.mlp_shards", ONE_LINER, True))
        hal = _student(tmp, mp, "hal", lambda: checks.check("01.bytes_per_param", 16))
        data = json.loads(hal.read_text())
        data["entries"].append({"kind": "coding", "key": "09.code.states_per_gpu", "event": "try", "answer": "fn",
                                "ok": True, "detail": {"source": {"not": "text"}}})  # a malformed item
        hal.write_text(json.dumps(data))
        _student(tmp, mp, "jon", lambda: (checks.predict("05.predict.mixed_bytes", 3),  # a reveal written by hand:
                                          journal.record("prediction", "05.predict.mixed_bytes", 3, True,  # its
                                                         event="reveal", truth=3, rel_tol=0.1)))  # chain holds
        (tmp / "class" / "ivy.json").write_text(json.dumps({"format": handin.FORMAT, "student": "ivy",
                                                            "entries": "no", "summary": [], "notebooks": 7}))
        rows = collect_mod.collect(tmp / "class", tmp / "out" / "new", timeout_s=5)
    finally:
        mp.undo()
    out = tmp / "out" / "new"

    def read(name: str) -> list[dict]:
        with open(out / name) as f:
            return list(csv.DictReader(f))

    return {r["student"]: r for r in rows}, read, out


def test_out_is_made_and_every_file_written(book):
    rows, read, out = book
    assert sorted(p.name for p in out.iterdir()) == ["class.csv", "class.json", "flags.csv", "items.csv",
                                                     "similarity.csv"]
    assert [r["student"] for r in read("class.csv")] == sorted(rows) == ["ana", "bob", "cy", "dan", "eve", "fay",
                                                                        "gus", "hal", "ivy", "jon"]


def test_coding_is_counted_from_the_rerun_never_from_the_handin(book):
    rows, read, _ = book
    assert rows["ana"]["coding_passed"] == 1 and rows["ana"]["flag_codes"] == ""
    assert rows["bob"]["coding_passed"] == 0 and "RERUN_DIFFERS" in rows["bob"]["flag_codes"]  # forged ok: true
    assert "SUMMARY_EDITED" in rows["bob"]["flag_codes"]
    assert rows["cy"]["coding_passed"] == 0 and "two" not in rows["cy"]["flags"] and "2 verdicts" in rows["cy"]["flags"]
    assert rows["dan"]["coding_passed"] == 0 and "RERUN_ERROR" in rows["dan"]["flag_codes"]  # no reply: not passed
    items = {(r["student"], r["item"]): r for r in read("items.csv")}
    assert items[("bob", "09.code.states_per_gpu")]["rerun_verdict"] == "fail"
    assert items[("bob", "09.code.states_per_gpu")]["verdict"] == "wrong"
    assert items[("cy", "09.code.states_per_gpu")]["rerun_verdict"].startswith("error: the sandbox gave 2 verdicts")


def test_items_are_long_form_with_guesses_tries_hints_and_codes(book):
    _, read, _ = book
    table = read("items.csv")
    assert tuple(table[0]) == collect_mod.gradebook.ITEM_COLUMNS
    items = {(r["student"], r["item"]): r for r in table}
    ex = items[("ana", "01.bytes_per_param")]
    assert (ex["kind"], ex["verdict"], ex["tries"], ex["hints_seen"]) == ("exercise", "right", "2", "1")
    late = items[("eve", "05.predict.mixed_bytes")]
    assert (late["committed_guess"], late["verdict"], late["after_reveal"]) == ('"no guess"', "no guess", "[16.0]")
    assert items[("ana", "05.predict.mixed_bytes")]["verdict"] == "right"
    assert items[("ana", "05.predict.zstd_ratio")]["verdict"] == "not revealed"  # registered, not reached: a row
    assert all(r["notebook"] == r["item"][:2] for r in table)


def test_a_renamed_copy_of_the_key_is_flagged_and_the_natural_one_liner_is_not(book):
    rows, read, _ = book
    assert "KEY_COPY" in rows["fay"]["flag_codes"] and "KEY_COPY" not in rows["gus"]["flag_codes"]
    flags = read("flags.csv")
    (copy,) = [f for f in flags if f["code"] == "KEY_COPY"]
    assert (copy["student"], copy["item"]) == ("fay", "02.build.zero1")
    assert similarity.normal(ONE_LINER).nodes < similarity.MIN_NODES <= similarity.normal(KEY_MODULE).nodes
    assert regrade_code.copy_flags({"02.build.zero1": renamed_key(), "03.code.mlp_shards": ONE_LINER})[0].key == \
        "02.build.zero1"


def test_a_malformed_item_or_file_is_a_flag_never_a_crash(book):
    rows, read, _ = book
    assert "MALFORMED" in rows["hal"]["flag_codes"] and rows["hal"]["exercises_right"] == 1  # the rest of hal counts
    assert "MALFORMED" in rows["ivy"]["flag_codes"]
    flags = read("flags.csv")
    assert all(f["code"] in regrade.CODES for f in flags) and all(f["message"] for f in flags)


def test_class_json_holds_the_pairs_figure_not_an_accusation(book):
    _, read, out = book
    detail = json.loads((out / "class.json").read_text())
    assert detail["similarity_threshold"]["min_nodes"] == similarity.MIN_NODES
    pairs = read("similarity.csv")
    states = [p for p in pairs if p["item"] == "09.code.states_per_gpu"]
    assert states and all(0 <= float(p["similarity"]) <= 1 for p in states)
    assert {(p["student_a"], p["student_b"]) for p in states} >= {("ana", "cy"), ("ana", "dan")}


def test_normal_forms_ignore_what_a_copier_changes_for_free():
    a = "def f(x: int) -> int:\n    '''Doc.'''\n    y = x + 1  # one\n    return y * 2\n"
    b = "def g(value):\n    total = value + 1\n\n    return total * 2\n"
    c = "def g(value):\n    total = value + 2\n    return total * 2\n"
    assert similarity.normal(a).dump == similarity.normal(b).dump != similarity.normal(c).dump
    stub = (ROOT / "labkit" / "practice" / "build" / "stubs" / "zero1.py").read_text()
    own = similarity.similarity(similarity.normal(KEY_MODULE), similarity.normal(stub), similarity.normal(stub))
    assert own < 0.1  # the stub's own k-grams count for no one


def test_the_command_line_makes_out_and_counts_no_code_it_did_not_run(book, tmp_path, capsys):
    from labkit.course.__main__ import main

    _, _, out = book
    new = tmp_path / "grades" / "week1"
    assert main(["collect", str(out.parent.parent / "class"), "--out", str(new), "--no-rerun"]) == 0
    assert "10 students in" in capsys.readouterr().out and (new / "items.csv").is_file()
    with open(new / "class.csv") as f:
        table = {r["student"]: r for r in csv.DictReader(f)}
    assert table["ana"]["coding_passed"] == "0" and "NOT_RERUN" in table["ana"]["flag_codes"]


def test_a_reveal_whose_value_is_not_the_keys_is_judged_by_the_keys(book):
    """jon wrote a reveal of his own guess as its truth, with an intact chain: judged against the key's 16."""
    rows, read, _ = book
    assert rows["jon"]["predictions_right"] == 0 and rows["jon"]["predictions_committed"] == 1
    assert "TRUTH_DIFFERS" in rows["jon"]["flag_codes"] and "CHAIN_BREAK" not in rows["jon"]["flag_codes"]
    assert rows["ana"]["predictions_right"] == 1 and "TRUTH_DIFFERS" not in rows["ana"]["flag_codes"]
