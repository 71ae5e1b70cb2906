"""Reveals of committed predictions: the learner guesses first, then the lab says right or wrong, and by how much.

A prediction is only worth making if the verdict is honest: counts are judged
exactly, continuous values within a relative tolerance that the caller fits to the
quantity (default 10%), and the two numbers are printed with enough digits that a
wrong guess never reads like the right one. A guess changed after its reveal (the
cell re-run with a new value) is noted, so a learner sees their first answer too.
"""

from __future__ import annotations

from labkit.errors import LabkitError, require_choice
from labkit.teach.diagnose import diagnose, same_text
from labkit.teach.feedback import Feedback
from labkit.teach.journal import record

DEFAULT_REL_TOL = 0.10
_FIRST_GUESS: dict[str, object] = {}
_YES = {"yes", "y", "true", "t", "1"}
_NO = {"no", "n", "false", "f", "0"}


def _changed(key: str, guess: object) -> str:
    """A note when ``guess`` differs from the first one revealed under ``key`` in this kernel."""
    if guess is None:
        return ""
    first = _FIRST_GUESS.setdefault(key, guess)
    return "" if first == guess else f" (Changed after the reveal: your first committed guess was {first!r}.)"


def reset_reveals() -> None:
    """Forget the first guesses (a new student, or a test)."""
    _FIRST_GUESS.clear()


def reveal(prediction: str | None, measured: dict[str, float], question: str = "largest category"):
    """Compare a committed guess of the largest entry of ``measured`` with the measurement."""
    largest = max(measured, key=measured.get)
    share = measured[largest] / sum(measured.values())
    if prediction is None:
        return Feedback(False, f"No prediction committed. The {question} is {largest} ({100 * share:.0f}%).")
    require_choice("prediction", prediction, measured)
    record("prediction", question, prediction, prediction == largest)
    verdict = "Right" if prediction == largest else f"Wrong: you said {prediction}"
    return Feedback(prediction == largest, f"{verdict}. The {question} is {largest}, {100 * share:.0f}% of the "
                    f"total.{_changed(question, prediction)}")  # fmt: skip


def reveal_number(guess: float | None, actual: float, what: str, unit: str = "GB", scale: float = 1e9, *,
                  rel_tol: float | None = None, exact: bool | None = None):
    """Compare a committed numeric guess with the value labkit measured or computed.

    ``exact`` (default: when the value is a whole number with no unit, i.e. a count)
    demands the exact value; otherwise the guess is right within ``rel_tol`` of it
    (default 10%), tight enough that a classic misconception (ZeRO-3 moving the
    same bytes as data parallelism: 1.0 against 1.5) is called wrong.
    """
    value = actual / scale
    if exact is None:
        exact = unit == "" and float(value).is_integer()
    tol = 0.0 if exact else (DEFAULT_REL_TOL if rel_tol is None else rel_tol)
    if tol < 0:
        raise LabkitError(f"rel_tol must be >= 0 (got {rel_tol!r})")

    def shown(text: str) -> str:
        return f"{text} {unit}" if unit else text

    if guess is None:
        return Feedback(False, f"No guess committed. {what}: {shown(same_text(value, value)[0])}.")
    try:
        g = float(guess)
    except (TypeError, ValueError):
        return Feedback(False, f"The guess must be a number (got {guess!r}). {what}: "
                        f"{shown(same_text(value, value)[0])}.")  # fmt: skip
    ok = g == value if exact or value == 0 else abs(g - value) <= tol * abs(value)
    mine, theirs = same_text(g, value)
    if ok:
        how = "exactly" if g == value else f"within {100 * tol:.0f}%"
        verdict = f"Right ({how})"
    elif value == 0:
        verdict = "Wrong"
    else:
        off = g / value
        by = f"{100 * abs(off - 1):.0f}%" if 0.5 <= off <= 2 else f"a factor of {max(off, 1 / off):,.3g}" if off > 0 \
            else "the sign"
        verdict = f"Wrong: too {'high' if g > value else 'low'} by {by}"
    slip = "" if ok else diagnose(g, value, unit=unit)
    slip = f" Likely slip: {slip}" + ("" if slip.endswith("?") else ".") if slip else ""
    record("prediction", what, g, ok, slip.strip())
    rule = "counts are judged exactly" if exact else f"right within {100 * tol:.0f}%"
    return Feedback(ok, f"{verdict}: you said {shown(mine)}. {what}: {shown(theirs)} ({rule}).{slip}"
                    f"{_changed(what, g)}", slip.strip())  # fmt: skip


def _as_bool(key: str, guess: object) -> bool | None:
    if guess is None or isinstance(guess, bool):
        return guess
    text = str(guess).strip().lower()
    if text in _YES:
        return True
    if text in _NO:
        return False
    raise LabkitError(f"guess for {key!r} must be one of True, False, 'yes', 'no' (got {guess!r})")


def reveal_claims(guesses: dict[str, object], truths: dict[str, bool]):
    """Compare yes/no guesses (True/False or "yes"/"no") with what the model says; right when every guess is."""
    lines, right = [], 0
    for key, truth in truths.items():
        guess = _as_bool(key, guesses.get(key))
        said = "no guess" if guess is None else ("you said yes" if guess else "you said no")
        hit = guess is not None and guess == bool(truth)
        right += hit
        mark = "right" if hit else ("-" if guess is None else "wrong")
        lines.append(f"{key}: {'yes' if truth else 'no'} ({said}: {mark}){_changed('claim:' + key, guess)}")
        record("prediction", "claim:" + key, guess, hit)
    answered = sum(_as_bool(k, guesses.get(k)) is not None for k in truths)
    lines.append(f"{right} of {len(truths)} right." if answered else "No guesses committed yet.")
    return Feedback(right == len(truths), "\n".join(lines))
