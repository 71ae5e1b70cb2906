"""The gradebook: one row per student and item, every verdict the re-graded one, never the hand-in's own.

What a teacher expects of a gradebook (nbgrader's is the anchor: one score per student, notebook and
cell, computed by the grader, with the student's claims kept apart): :func:`item_rows` turns one
hand-in's journal lines into the long table of ``items.csv`` (:data:`ITEM_COLUMNS`), a row for every
registered item of every notebook handed in, answered or not:

* a prediction by its committed guess, the one in force at its first reveal (from the journal's commit
  and reveal lines, as :mod:`labkit.teach.predictions` rules), re-judged against the revealed value, or
  the key's where the two differ beyond the judge's tolerance (:func:`labkit.course.regrade.reveal_truth`);
* a self-check or reasoning exercise by whether any try is right when labkit grades it again, its tries,
  and the hint steps its wrong tries showed before the first right one;
* coding and build-it by the sandbox's re-run of the submitted source alone: a stored pass whose re-run
  fails, an ``ok: true`` with no re-run behind it, or a re-run that errs is not passed;
* a design task or the capstone by whether a stored setting meets it again on a fresh panel or advisor.

:func:`totals` sums those rows into the columns of ``class.csv``.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

from labkit.course import regrade
from labkit.course.sandbox import Rerun
from labkit.teach import journal
from labkit.teach.predictions import NO_GUESS, PREDICTIONS, state

ITEM_COLUMNS = ("student", "notebook", "item", "kind", "committed_guess", "verdict", "tries", "hints_seen",
                "after_reveal", "rerun_verdict", "flags")
KINDS = ("prediction", "exercise", "reasoning", "coding", "design", "capstone")


@dataclass
class ItemRow:
    """One student's one item, re-graded. ``verdict``: right, wrong, no guess, not revealed, not answered,
    not re-run (coding with ``--no-rerun``) or unknown (an item this labkit does not have)."""

    student: str
    notebook: str
    item: str
    kind: str
    committed_guess: str = ""  # predictions: the guess in force at the first reveal, as JSON
    verdict: str = "not answered"
    tries: int = 0
    hints_seen: int | str = ""
    after_reveal: str = ""  # predictions: guesses committed after the first reveal, as JSON
    rerun_verdict: str = ""  # coding: pass, fail or "error: why"
    flags: list[str] = field(default_factory=list)  # codes from regrade.CODES

    def csv(self) -> dict[str, object]:
        return asdict(self) | {"flags": ";".join(sorted(set(self.flags)))}


def registered(notebooks: list[str]) -> dict[str, str]:
    """Every item of these notebooks, id -> kind: predictions, self-checks, reasoning, coding, design, capstone."""
    from labkit import practice
    from labkit.practice import design
    from labkit.teach.checks import kind_of

    found = {k: "prediction" for k in PREDICTIONS}
    found |= {k: kind_of(k) for k in regrade.exercises()}
    found |= {k: "coding" for k in practice.CODING}
    found |= {f"{nb}.design": "design" for nb in design.TASKS}
    found["09.capstone"] = "capstone"
    return {k: v for k, v in sorted(found.items()) if k[:2] in notebooks}


def _json(value: object) -> str:
    return "" if value is None else json.dumps(value, sort_keys=True)


def _prediction(row: ItemRow, group: list[journal.Entry]) -> None:
    st = state(row.item, group)
    row.tries = sum(e.event == "commit" for e in group)
    row.after_reveal = _json(list(st.after)) if st.after else ""
    if not st.revealed:
        row.committed_guess, row.verdict = _json(st.latest), "not revealed"
        return
    row.committed_guess = _json(st.committed)
    if st.committed == NO_GUESS:
        row.verdict = NO_GUESS
        return
    first = next((e for e in group if e.event == "reveal" and e.answer == st.committed), None)
    row.verdict = "right" if first is not None and regrade.reveal_ok(first) else "wrong"


def _exercise(row: ItemRow, group: list[journal.Entry]) -> None:
    tries = [e for e in group if e.event == "try" and e.answer is not None]
    row.tries = len(tries)
    if not tries:
        return
    oks = [regrade.exercise_ok(e) for e in tries]
    if any(ok is None for ok in oks):
        row.verdict = "unknown"
        return
    first = next((i for i, ok in enumerate(oks) if ok), None)
    steps = len(regrade.exercises()[row.item].steps()) + 1  # the last step is the worked answer
    row.hints_seen = min(first if first is not None else len(tries), steps)
    row.verdict = "right" if first is not None else "wrong"


def _coding(row: ItemRow, group: list[journal.Entry], reruns: dict[str, Rerun] | None) -> None:
    from labkit import practice

    tries = [e for e in group if e.event == "try" and e.answer is not None]
    row.tries = len(tries)
    if not tries:
        return
    stored = [bool(e.ok) for e in tries]
    first = stored.index(True) if True in stored else len(stored)
    ex = practice.CODING.get(row.item)
    row.hints_seen = min(first, len(ex.steps_for([]))) if ex is not None else first  # what the student was shown
    if reruns is None:
        row.verdict, row.rerun_verdict = "not re-run", ""
        return
    r = reruns.get(row.item)
    if r is None or r.ok is None:
        row.verdict = "wrong"
        row.rerun_verdict = f"error: {r.message if r is not None else 'not re-run'}"
        return
    row.verdict, row.rerun_verdict = ("right", "pass") if r.ok else ("wrong", "fail")


def _design(row: ItemRow, group: list[journal.Entry]) -> None:
    tries = [e for e in group if e.event == "try" and e.answer is not None]
    row.tries = len(tries)
    if tries:
        met = any(e.ok and regrade.design_met(e)[0] for e in tries)
        row.verdict = "right" if met else "wrong"


def item_rows(student: str, entries: list[journal.Entry], notebooks: list[str],
              reruns: dict[str, Rerun] | None, flags: list[regrade.Flag]) -> list[ItemRow]:
    """The re-graded rows of one hand-in (``reruns``: the sandbox's verdicts by key; None: not re-run)."""
    by_key: dict[str, list[journal.Entry]] = {}
    for e in entries:
        by_key.setdefault(e.key, []).append(e)
    books = sorted(set(notebooks) | {k[:2] for k in by_key})
    known = registered(books)
    rows = []
    for key in sorted(set(known) | set(by_key)):
        group = by_key.get(key, [])
        kind = known.get(key) or str(group[0].kind)
        row = ItemRow(student, key[:2], key, kind)
        row.flags = [f.code for f in flags if f.key == key]
        try:
            if key not in known:
                row.verdict, row.tries = "unknown", len(group)
                row.flags.append("UNKNOWN_ITEM")
            elif kind == "prediction":
                _prediction(row, group)
            elif kind in ("exercise", "reasoning"):
                _exercise(row, group)
            elif kind == "coding":
                _coding(row, group, reruns)
            else:
                _design(row, group)
        except Exception:  # noqa: BLE001 - a malformed item is graded as not answered, never a crash for the class
            row.verdict, row.flags = "not answered", [*row.flags, "MALFORMED"]
        rows.append(row)
    return rows


TOTALS = ("predictions_registered", "predictions_committed", "predictions_right", "predictions_no_guess",
          "exercises_right", "exercises_tries", "reasoning_right", "reasoning_tries", "coding_passed", "coding_tries",
          "design_met", "capstone_met")


def totals(rows: list[ItemRow]) -> dict[str, int]:
    """The counts of ``class.csv`` from re-graded rows (a student's rows over all their notebooks)."""
    def count(kind: str, verdicts: tuple[str, ...]) -> int:
        return sum(r.kind == kind and r.verdict in verdicts for r in rows)

    def tries(kind: str) -> int:
        return sum(r.tries for r in rows if r.kind == kind)

    return {"predictions_registered": sum(r.kind == "prediction" and r.item in PREDICTIONS for r in rows),
            "predictions_committed": count("prediction", ("right", "wrong")),
            "predictions_right": count("prediction", ("right",)),
            "predictions_no_guess": count("prediction", (NO_GUESS,)),
            "exercises_right": count("exercise", ("right",)), "exercises_tries": tries("exercise"),
            "reasoning_right": count("reasoning", ("right",)), "reasoning_tries": tries("reasoning"),
            "coding_passed": count("coding", ("right",)), "coding_tries": tries("coding"),
            "design_met": count("design", ("right",)), "capstone_met": count("capstone", ("right",))}
