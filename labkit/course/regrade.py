"""Re-grade a hand-in from its own lines: every verdict labkit can recompute, recomputed here.

* self-checks and reasoning: the stored answer against the exercise's answer from labkit's model;
* predictions: the stored guess against the revealed value, with the registry's tolerance;
* design tasks: the stored panel settings set on a fresh panel, and the task's check run;
* the capstone: the stored layout graded again by the advisor;
* coding and build-it: :mod:`labkit.course.regrade_code` (the sandbox's re-run, and a fair copy check).

Each disagreement is a :class:`Flag` with a code (:data:`CODES`) and a message naming the record.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import io
import json
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from labkit.course.copies import ROOT
from labkit.teach import journal, prediction_mistakes

TOPICS = ("storage", "inter_layer", "intra_layer", "offload", "reduction", "resilience", "economics", "future",
          "advisor")
PREDICTION_ANSWERS = ROOT / "instructor" / "predictions.json"  # what each reveal showed in the solved notebooks

CODES = {
    "CHAIN_BREAK": "the journal's hash chain shows a line deleted, moved or edited, or no chain at all",
    "NOT_ENTRIES": "lines of the hand-in that are not journal entries",
    "SUMMARY_EDITED": "the stored summary is not what the hand-in's own lines give",
    "DIGEST": "the digest does not match the file (edited after export)",
    "MALFORMED": "a hand-in or an item labkit cannot read; graded as not answered",
    "UNKNOWN_ITEM": "an item this labkit does not have",
    "REGRADED": "a stored verdict that labkit's re-grade does not give",
    "TRUTH_DIFFERS": "a reveal whose value is not the key's (beyond the judge's tolerance): judged by the key's",
    "DESIGN_UNCONFIRMED": "a design or capstone stored as met that labkit's check does not confirm",
    "RERUN_DIFFERS": "submitted code whose re-run verdict differs from the stored one",
    "RERUN_ERROR": "submitted code that could not be re-run (a timeout, no verdict, a malformed reply)",
    "NOT_RERUN": "submitted code not re-run (collect --no-rerun): not counted as passed",
    "KEY_COPY": "a long solution that is the key's once names, docstrings, comments and annotations are dropped",
    "DUPLICATE": "an item handed in in more than one file: the first file's counts",
}


@dataclass(frozen=True)
class Flag:
    """One record whose stored verdict or origin is not what it claims: a code from :data:`CODES`, a message."""

    key: str
    what: str
    code: str = "REGRADED"

    def __str__(self) -> str:
        return f"{self.key}: {self.what}" if self.key else self.what


def exercises() -> dict:
    for topic in TOPICS:
        importlib.import_module(f"labkit.{topic}.exercises")
    import labkit.practice  # noqa: F401 - registers the reasoning exercises
    from labkit.teach import checks

    return checks.EXERCISES


def _number(x: object) -> float | None:
    if isinstance(x, bool):
        return None
    try:
        value = float(x)
    except (TypeError, ValueError, OverflowError):
        return None
    return value if math.isfinite(value) else None


def exercise_ok(e: journal.Entry) -> bool | None:
    """The re-graded verdict of one self-check or reasoning try (None: no such exercise here)."""
    known = exercises()
    if e.key not in known:
        return None
    ex, value = known[e.key], _number(e.answer)
    right = ex.answer()
    return value is not None and abs(value - right) <= ex.rel_tol * abs(right) + 1e-12


def exercise_flags(entries: list[journal.Entry]) -> list[Flag]:
    """Self-check and reasoning tries whose stored verdict labkit's model does not give."""
    flags = []
    for e in entries:
        if e.kind not in ("exercise", "reasoning") or e.event != "try":
            continue
        ok = exercise_ok(e)
        if ok is None:
            flags.append(Flag(e.key, "no such exercise in this labkit", "UNKNOWN_ITEM"))
        elif ok != bool(e.ok):
            right = exercises()[e.key].answer()
            flags.append(Flag(e.key, f"stored {'right' if e.ok else 'wrong'} for {e.answer!r}, re-graded "
                                     f"{'right' if ok else 'wrong'} (answer {right:.6g})"))
    return flags


def key_answers(path: Path = PREDICTION_ANSWERS) -> dict:
    """The value each reveal showed when the solved notebooks were built (``instructor/predictions.json``;
    {} without it, as in a student release)."""
    try:
        return _answers(str(path), Path(path).stat().st_mtime)
    except OSError:
        return {}


@functools.lru_cache(maxsize=4)
def _answers(path: str, _mtime: float) -> dict:
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _judge(key: str, guess: object, truth: object, detail: dict) -> bool:
    if isinstance(truth, int | float) and not isinstance(truth, bool):
        g = _number(guess)
        rules = prediction_mistakes.judging(key)  # the registry's tolerance, not the one the hand-in stores
        if rules is not None:
            tol = 0.0 if rules.exact else rules.rel_tol
        else:
            tol = 0.0 if detail.get("exact") else (_number(detail.get("rel_tol", 0.1)) or 0.0)
        return g is not None and (g == truth if tol == 0 or truth == 0 else abs(g - truth) <= tol * abs(truth))
    if isinstance(truth, dict):
        return isinstance(guess, dict) and all(guess.get(k) == v for k, v in truth.items())
    return guess == truth


def reveal_truth(e: journal.Entry) -> tuple[object, bool]:
    """The value a reveal is judged against, and whether the hand-in's own differs from the key's: the one it
    stores (its own run's measurement), unless the key's is not within the judge's tolerance of it (the
    hand-in's is then not its measurement), when it is the key's."""
    stored, key = e.detail.get("truth"), key_answers().get(e.key)
    if key is None or _judge(e.key, stored, key, e.detail):
        return stored, False
    return key, True


def reveal_ok(e: journal.Entry) -> bool:
    """Whether a reveal's guess is right against its value (:func:`reveal_truth`), by the registry's tolerance."""
    return _judge(e.key, e.answer, reveal_truth(e)[0], e.detail)


def prediction_flags(entries: list[journal.Entry]) -> list[Flag]:
    """Reveals whose stored verdict does not follow from the guess and the value revealed, or whose revealed
    value is not the key's."""
    flags = []
    for e in entries:
        if e.kind != "prediction" or e.event != "reveal":
            continue
        truth, differs = reveal_truth(e)
        if differs:
            flags.append(Flag(e.key, f"revealed {e.detail.get('truth')!r}, where the key's run revealed {truth!r}: "
                                     "judged against the key's", "TRUTH_DIFFERS"))
        ok = reveal_ok(e)
        if ok != bool(e.ok):
            flags.append(Flag(e.key, f"stored {'right' if e.ok else 'wrong'} for the guess {e.answer!r}, but it is "
                                     f"{'right' if ok else 'wrong'} against {truth!r}"))
    return flags


_MET: dict[tuple[str, str], tuple[bool | None, str]] = {}


@contextlib.contextmanager
def quiet_panels() -> Iterator[None]:
    """Panels made outside a notebook: what their output widget prints (``ESC[2K`` and each figure's repr,
    the 113 lines the key once started with) kept off stdout, and the pyplot figures they opened closed."""
    import matplotlib.pyplot as plt

    before = set(plt.get_fignums())
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            yield
    finally:
        for num in set(plt.get_fignums()) - before:
            plt.close(num)


def design_met(e: journal.Entry) -> tuple[bool | None, str]:
    """Whether a design try's (or the capstone's) stored settings meet the task again here; None and why when
    they cannot be set. Cached: a class hands in the same settings many times."""
    from labkit.errors import LabkitError
    from labkit.practice import design

    marker = (e.key, repr(e.answer))
    if marker not in _MET:
        try:
            if e.kind == "capstone":
                from labkit.advisor import capstone

                _MET[marker] = bool(capstone.grade(e.answer)), ""
            else:
                _goal, check, make = design.TASKS[e.key[:2]]
                with quiet_panels():
                    panel = make()
                    panel.set_values(**e.answer)
                    _MET[marker] = bool(check(panel)[0]), ""
        except (LabkitError, KeyError, AttributeError, TypeError, ValueError) as err:
            _MET[marker] = None, str(err)
    return _MET[marker]


def design_flags(entries: list[journal.Entry]) -> list[Flag]:
    """Design checks stored as met (and the capstone within budget) that labkit does not confirm."""
    flags, seen = [], set()
    for e in entries:
        if e.event != "try" or not e.ok or e.kind not in ("design", "capstone") or (e.key, repr(e.answer)) in seen:
            continue
        seen.add((e.key, repr(e.answer)))
        met, why = design_met(e)
        if met is None:
            flags.append(Flag(e.key, f"stored settings {e.answer!r} cannot be set again ({why})", "MALFORMED"))
        elif not met:
            flags.append(Flag(e.key, f"stored as met with {e.answer!r}, but labkit's check says not met",
                              "DESIGN_UNCONFIRMED"))
    return flags
