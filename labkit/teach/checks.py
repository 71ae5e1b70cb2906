"""Self-check exercises: each answer is checked against labkit's own model, never a stored number.

An exercise has a question, a function that computes the right answer from the
lab's formulas and data, a relative tolerance, hints and an explanation.
``check(key, answer)`` returns ``Feedback``, which a notebook shows as the cell's
result and a test reads as a bool. Feedback teaches the way a tutor would:

* no hint before a first try (the question alone), then one more hint step per wrong
  try, the last step being the worked answer;
* a wrong answer is diagnosed: first against the exercise's own likely mistakes
  (a forgotten term, the wrong degree), then against unit slips (bytes vs GB, x1e9,
  bits vs bytes, percent vs fraction, GB vs GiB) by :mod:`labkit.teach.diagnose`.

The committed-prediction reveals (``reveal``, ``reveal_number``, ``reveal_claims``),
``predict`` and ``PASS`` live in :mod:`labkit.teach.reveal` and :mod:`labkit.teach.predictions`,
and ``export_answers`` in :mod:`labkit.teach.handin`; they are re-exported here, as notebooks
call them through this module. Every try is appended to the journal file as it is given.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from labkit.errors import LabkitError, require_choice
from labkit.teach import predictions  # noqa: F401 - the registry and state, for tests and the course tools
from labkit.teach.diagnose import diagnose, same_text
from labkit.teach.feedback import Feedback
from labkit.teach.handin import export_answers  # noqa: F401 - notebooks export through checks
from labkit.teach.journal import record
from labkit.teach.predictions import PASS, predict  # noqa: F401 - notebooks commit and pass through checks
from labkit.teach.reveal import reveal, reveal_claims, reveal_number  # noqa: F401 - notebooks reveal through checks


@dataclass(frozen=True)
class Mistake:
    """A likely wrong answer of one exercise: what the student did, and the value it gives."""

    name: str
    value: Callable[[], float]


@dataclass(frozen=True)
class Exercise:
    question: str
    answer: Callable[[], float]
    rel_tol: float
    hint: str | tuple[str, ...]  # one hint, or hint steps shown one more per wrong try
    why: str | Callable[[], str]  # a callable computes its figures with labkit, when it is shown
    mistakes: tuple[Mistake, ...] = ()
    unit: str = ""  # the unit the question asks in ("GB", "min", "fraction"): which unit slips to name

    def steps(self) -> tuple[str, ...]:
        """The hint steps; the worked answer is appended by :func:`check` as the last step."""
        return (self.hint,) if isinstance(self.hint, str) else tuple(self.hint)


EXERCISES: dict[str, Exercise] = {}
_WRONG_TRIES: dict[str, int] = {}


def register(key: str, exercise: Exercise) -> None:
    """Add a topic's exercise: topic modules sit above this one, so they register themselves here."""
    EXERCISES[key] = exercise


def reset_attempts(key: str | None = None) -> None:
    """Forget the wrong tries of one exercise (or all): hints start again from the first step."""
    if key is None:
        _WRONG_TRIES.clear()
    else:
        _WRONG_TRIES.pop(key, None)


def kind_of(key: str) -> str:
    """"reasoning" for the two-step exercises (``NN.reason.name``), "exercise" for the look-ups."""
    return "reasoning" if ".reason." in key else "exercise"


def _why(ex: Exercise) -> str:
    return ex.why() if callable(ex.why) else ex.why


def _diagnosis(ex: Exercise, value: float, right: float) -> str:
    for mistake in ex.mistakes:
        wrong = mistake.value()
        if abs(value - wrong) <= max(ex.rel_tol, 1e-3) * abs(wrong) + 1e-12 and abs(wrong - right) > 1e-12:
            return mistake.name
    return diagnose(value, right, unit=ex.unit)


def _not_registered(key: str) -> str:
    """Why ``key`` is unknown when no exercise of its kind and notebook is registered yet: the import it needs."""
    if ".reason." in key:
        return (f"exercise {key!r} is not registered yet: run `from labkit.practice import reasoning` first "
                "(importing it registers the reasoning exercises; the cell above this one does)")
    return (f"exercise {key!r} is not registered yet: run notebook {key[:2]}'s first cell first (it imports "
            f"the exercises module that registers notebook {key[:2]}'s self-checks)")


def check(key: str, answer: float | None) -> Feedback:
    """Feedback on ``answer`` to exercise ``key``: right (with why), or the mistake named and a hint step."""
    if key not in EXERCISES and isinstance(key, str) and not any(
            k[:2] == key[:2] and kind_of(k) == kind_of(key) for k in EXERCISES):
        raise LabkitError(_not_registered(key))
    require_choice("exercise", key, EXERCISES)
    ex = EXERCISES[key]
    if answer is None:
        return Feedback(False, f"Not answered yet. {ex.question}")
    try:
        value = float(answer)
    except (TypeError, ValueError):
        return Feedback(False, f"The answer must be a number (got {answer!r}). {ex.question}")
    if not math.isfinite(value):
        return Feedback(False, f"The answer must be a finite number (got {answer!r}). {ex.question}")
    right = ex.answer()
    if abs(value - right) <= ex.rel_tol * abs(right) + 1e-12:
        record(kind_of(key), key, value, True, right=right, rel_tol=ex.rel_tol)
        _WRONG_TRIES.pop(key, None)
        return Feedback(True, f"Right: {same_text(right, value)[0]}. {_why(ex)}")
    tries = _WRONG_TRIES[key] = _WRONG_TRIES.get(key, 0) + 1
    steps = (*ex.steps(), f"Worked answer: {same_text(right, value)[0]}. {_why(ex)}")
    shown = steps[: min(tries, len(steps))]
    mine, theirs = same_text(value, right)
    direction = "high" if value > right else "low"
    diagnosis = _diagnosis(ex, value, right)
    record(kind_of(key), key, value, False, diagnosis, right=right, rel_tol=ex.rel_tol)
    lines = [f"Not quite: {mine} is too {direction}."]
    if diagnosis:
        lines.append(f"Likely mistake: {diagnosis}" + ("" if diagnosis.endswith("?") else "."))
    lines += [f"Hint {i + 1}: {s}" if i < len(steps) - 1 else s for i, s in enumerate(shown)]
    if tries < len(steps):
        lines.append("(Try again: each wrong try shows one more step.)")
    return Feedback(False, "\n".join(lines), diagnosis)

