"""Reveals of committed predictions: the learner guesses first, then the lab says right or wrong, and by how much.

A prediction is only worth making if the verdict is honest: counts are judged exactly,
continuous values within a relative tolerance the caller fits to the quantity (default 10%),
and the two numbers are printed with enough digits that a wrong guess never reads like the
right one. With its registered id (``key=``, :mod:`labkit.teach.predictions`) a reveal is
locked: no answer without a committed guess or an explicit pass, a malformed guess refused
without the answer, and a guess set after the first reveal shown and recorded as such.
"""

from __future__ import annotations

import math

from labkit.errors import LabkitError
from labkit.teach import journal
from labkit.teach.choice_mistakes import choice_mistake, claim_mistake
from labkit.teach.diagnose import diagnose, named_mistake, same_text
from labkit.teach.feedback import Feedback
from labkit.teach.prediction_mistakes import judging, named
from labkit.teach.predictions import NO_GUESS, PASS, answer_for_key, commit, predict, registered, state

DEFAULT_REL_TOL = 0.10
_YES = {"yes", "y", "true", "t", "1"}
_NO = {"no", "n", "false", "f", "0"}


def reset_reveals() -> None:
    """Nothing to forget in the kernel: a prediction's state lives in the journal file (kept for callers)."""


def _refused(key: str | None, what: str, why: str = "") -> Feedback:
    """The answer stays hidden: no guess (recorded as "no guess" once), or ``why`` the guess is not one."""
    if why:
        if key:
            journal.record("prediction", key, why, None, event="malformed")
        return Feedback(False, f"Not a guess, so nothing is revealed: {why}. Fix it in the cell above and run both.")
    if key is None:
        return Feedback(False, f"No guess committed: {what} stays hidden until you commit one.")
    if not state(key).revealed:
        journal.record("prediction", key, NO_GUESS, False, event="refused")
    return Feedback(False, f"No guess committed for {key}, so its answer stays hidden; recorded as 'no guess'. "
                    f"The cells below show the measurement, so a guess set now counts as 'after reveal'. To see "
                    f"the answer here: set your guess above and run both cells, or run "
                    f"checks.predict({key!r}, checks.PASS).")  # fmt: skip


def _gate(key: str | None, guess: object, kind: str) -> tuple[object, bool]:
    """(the guess to judge, whether the student passed); a key's committed guess stands in for a None."""
    if key is None:
        return (None, False) if guess is PASS else (guess, False)
    if registered(key).kind != kind:
        raise LabkitError(f"key {key!r} is a {registered(key).kind} prediction, not a {kind} one")
    if guess is PASS:
        predict(key, PASS)
        return None, True
    if isinstance(guess, dict) and all(v is None for v in guess.values()):
        guess = None
    st = state(key)
    if guess is None and st.latest not in (None, NO_GUESS):
        return st.latest, False
    return guess, st.passed


def _judged(key: str | None, guess: object, ok: bool, diagnosis: str = "", **truth: object) -> str:
    """Record the reveal of ``guess``; the note when it came after the first reveal (not scored)."""
    if key is None:
        return ""
    before = state(key)
    commit(key, guess)
    journal.record("prediction", key, guess, ok, diagnosis, event="reveal", after_reveal=before.revealed and
                   journal.jsonable(guess) != before.committed, **truth)  # fmt: skip
    if not before.revealed or journal.jsonable(guess) == before.committed:
        return ""
    first = before.committed if before.committed == NO_GUESS else repr(before.committed)
    return f" (After the reveal, so not scored: your committed guess was {first}.)"


def _choice(prediction: object, options: list[str]) -> str | None:
    """The option ``prediction`` names, ignoring case and spaces ("Activations" is "activations")."""
    text = str(prediction).strip().lower()
    return next((o for o in options if o.lower() == text), None)


def reveal(prediction: str | None, measured: dict[str, float], question: str = "largest category", *,
           key: str | None = None) -> Feedback:
    """Compare a committed guess of the largest entry of ``measured`` with the measurement."""
    largest = max(measured, key=measured.get)
    share = measured[largest] / sum(measured.values())
    answer = f"The {question} is {largest}, {100 * share:.0f}% of the total."
    answer_for_key(key, largest)
    prediction, passed = _gate(key, prediction, "choice")
    if prediction is None:
        return Feedback(False, f"You passed: no guess. {answer}") if passed else _refused(key, question)
    name = _choice(prediction, list(measured))
    if name is None:
        return _refused(key, question, f"prediction must be one of {', '.join(measured)} (got {prediction!r})")
    ok = name == largest
    why = choice_mistake(key, name, largest)
    why = f" Likely mistake: {why}." if why else ""
    note = _judged(key, name, ok, why.strip(), truth=largest)
    return Feedback(ok, f"{'Right' if ok else f'Wrong: you said {name}'}. {answer}{why}{note}", why.strip())


def reveal_number(guess: float | None, actual: float, what: str, unit: str = "GB", scale: float = 1e9, *,
                  rel_tol: float | None = None, exact: bool | None = None, key: str | None = None,
                  mistakes: dict[str, float] | None = None) -> Feedback:
    """Compare a committed numeric guess with the value labkit measured or computed.

    A registered numeric ``key`` brings its judging from :mod:`labkit.teach.prediction_mistakes`:
    its tolerance (which takes precedence over ``rel_tol`` and ``exact``, so a question is judged
    the same wherever it is revealed), the unit family whose slips to name, and its likely
    mistakes. ``mistakes`` adds the caller's own (name: wrong value in the shown unit). A wrong
    guess that matches a mistake is diagnosed by its name before any unit slip is looked for.

    Without a registered key, ``exact`` (default: when the value is a whole number with no unit,
    i.e. a count) demands the exact value; otherwise the guess is right within ``rel_tol`` of it
    (default 10%), tight enough that a classic misconception (ZeRO-3 moving the same bytes as
    data parallelism: 1.0 against 1.5) is called wrong.
    """
    value = float(actual / scale)
    rules = judging(key)
    if rules is not None:
        exact, rel_tol = rules.exact, rules.rel_tol
    if exact is None:
        exact = unit == "" and value.is_integer()
    tol = 0.0 if exact else (DEFAULT_REL_TOL if rel_tol is None else rel_tol)
    if tol < 0:
        raise LabkitError(f"rel_tol must be >= 0 (got {rel_tol!r})")

    def shown(text: str) -> str:
        return f"{text} {unit}" if unit else text

    rule = "counts are judged exactly" if exact else f"tolerance {100 * tol:.0f}%"
    answer_for_key(key, value)
    guess, passed = _gate(key, guess, "number")
    if guess is None:
        return Feedback(False, f"You passed: no guess. {what}: {shown(same_text(value, value)[0])}.") if passed \
            else _refused(key, what)
    try:
        g = float(guess)
    except (TypeError, ValueError):
        g = math.nan
    if not math.isfinite(g):
        return _refused(key, what, f"the guess must be a number, like 0.25 or 16 (got {guess!r})")
    ok = g == value if exact or value == 0 else abs(g - value) <= tol * abs(value)
    mine, theirs = same_text(g, value)
    if ok:
        verdict = f"Right ({'exactly' if g == value else f'within {100 * tol:.0f}%'})"
    elif value == 0:
        verdict = "Wrong"
    else:
        off = g / value
        by = f"{100 * abs(off - 1):.0f}%" if 0.5 <= off <= 2 else f"a factor of {max(off, 1 / off):,.3g}" if off > 0 \
            else "the sign"
        verdict = f"Wrong: too {'high' if g > value else 'low'} by {by}"
    slip = _why_wrong(key, g, value, tol, unit, mistakes) if not ok else ""
    note = _judged(key, g, ok, slip.strip(), truth=value, rel_tol=tol, exact=exact, unit=unit)
    return Feedback(ok, f"{verdict}: you said {shown(mine)}. {what}: {shown(theirs)} ({rule}).{slip}{note}",
                    slip.strip())


def _why_wrong(key: str | None, guess: float, right: float, tol: float, unit: str,
               mistakes: dict[str, float] | None) -> str:
    """" Likely mistake: ..." for a registered or listed mistake, else " Likely slip: ...?" for a unit slip."""
    rules = judging(key)
    mistake = named(key, guess, right, tol) or named_mistake(guess, right, mistakes or {}, tol)
    if mistake:
        return f" Likely mistake: {mistake}" + ("" if mistake.endswith((".", "?")) else ".")
    slip = diagnose(guess, right, unit=(rules.slips or unit) if rules else unit)
    return f" Likely slip: {slip}" + ("" if slip.endswith("?") else ".") if slip else ""


def _as_bool(guess: object) -> bool | None:
    if guess is None or isinstance(guess, bool):
        return guess
    text = str(guess).strip().lower()
    return True if text in _YES else False if text in _NO else None


def reveal_claims(guesses: dict[str, object], truths: dict[str, bool], *, key: str | None = None) -> Feedback:
    """Compare yes/no guesses (True/False or "yes"/"no") with what the model says; right when every guess is."""
    answer_for_key(key, {k: bool(v) for k, v in truths.items()})
    given, passed = _gate(key, guesses, "claims")
    given = given if isinstance(given, dict) else {}
    bad = [k for k, v in given.items() if v is not None and _as_bool(v) is None]
    if bad:
        return _refused(key, "the claims", f"guess for {bad[0]!r} must be one of True, False, 'yes', 'no' "
                        f"(got {given[bad[0]]!r})")  # fmt: skip
    said = {k: _as_bool(given.get(k)) for k in truths}
    if all(v is None for v in said.values()):
        if not passed:
            return _refused(key, "the claims")
        return Feedback(False, "You passed: no guess.\n" + "\n".join(f"{k}: {'yes' if t else 'no'}"
                                                                      for k, t in truths.items()))
    lines, right, whys = [], 0, []
    for claim, truth in truths.items():
        guess = said[claim]
        hit = guess is not None and guess == bool(truth)
        right += hit
        mine = "no guess" if guess is None else ("you said yes" if guess else "you said no")
        mark = "right" if hit else "-" if guess is None else "wrong"
        why = claim_mistake(key, claim, guess, bool(truth))
        whys += [why] if why else []
        why_text = f". Likely mistake: {why}." if why else ""
        lines.append(f"{claim}: {'yes' if truth else 'no'} ({mine}: {mark}){why_text}")
    lines.append(f"{right} of {len(truths)} right.")
    diagnosis = "; ".join(whys)
    note = _judged(key, said, right == len(truths), diagnosis, truth={k: bool(v) for k, v in truths.items()})
    return Feedback(right == len(truths), "\n".join(lines) + note, diagnosis)
