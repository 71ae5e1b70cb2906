"""A coding exercise, its test cases and its check: what every exercise module of this package builds on."""


from __future__ import annotations

import inspect
import textwrap
from collections.abc import Callable
from dataclasses import dataclass

from labkit.errors import require_choice
from labkit.teach import journal
from labkit.teach.feedback import Feedback
from labkit.teach.journal import record


@dataclass(frozen=True)
class Case:
    """One test of the learner's function: its name, whether it passed, what went wrong (the fact, never the
    fix), and the hint steps of what THIS case shows (a question first, then a direction), when it fails."""

    name: str
    ok: bool
    detail: str = ""
    hints: tuple[str, ...] = ()


@dataclass(frozen=True)
class CodingExercise:
    """A coding exercise: the task, its tests, and feedback that escalates one step per failed try.

    The steps a failed try shows are those of the first failed case that has hints (so the hint
    depends on which test failed), else the general ``hint``; then ``worked``, the algorithm in
    words, as the last step. Try 1 shows step 1 only, try 2 steps 1-2, try 3 the worked answer:
    as the self-checks of :mod:`labkit.teach.checks` do, two hint steps before any worked answer,
    so no first failure gives the whole algorithm away.
    """

    key: str
    task: str  # what to write, with the signature
    run: Callable[..., list[Case]]  # the learner's function (and any measured inputs) -> cases
    hint: str | tuple[str, ...]  # the general hint steps, for a failure no case explains (an exception)
    worked: str = ""  # the worked answer, in words: shown after two failed tries

    def steps_for(self, failed: list[Case]) -> tuple[str, ...]:
        """Hint steps for these failed cases (the first failed case with hints), then the worked answer."""
        hints = next((c.hints for c in failed if c.hints), None)
        steps = hints or ((self.hint,) if isinstance(self.hint, str) else tuple(self.hint))
        return (*steps, *((f"Worked answer: {self.worked}",) if self.worked else ()))


CODING: dict[str, CodingExercise] = {}


def register(ex: CodingExercise) -> None:
    CODING[ex.key] = ex


def failed_tries(key: str) -> int:
    """Failed tries of ``key`` since its last pass, read from the journal: a kernel restart keeps the count."""
    count = 0
    for e in journal.of(key):
        if e.kind == "coding" and e.event == "try":
            count = 0 if e.ok else count + 1
    return count


def check_code(key: str, fn: Callable | None, **measured: object) -> Feedback:
    """Run exercise ``key``'s real tests on ``fn``; ``measured`` passes results the notebook already measured."""
    require_choice("coding exercise", key, CODING)
    ex = CODING[key]
    if fn is None:
        return Feedback(False, f"Not written yet. {ex.task}")
    try:
        cases = ex.run(fn, **measured)
    except NotImplementedError:
        return Feedback(False, f"Not written yet: the function still raises NotImplementedError. {ex.task}")
    failed = [c for c in cases if not c.ok]
    lines = [f"{'pass' if c.ok else 'FAIL'}  {c.name}" + (f": {c.detail}" if c.detail and not c.ok else "")
             for c in cases]  # fmt: skip
    record("coding", key, getattr(fn, "__name__", "fn"), not failed, "; ".join(c.name for c in failed),
           source=source_of(fn), failed=[c.name for c in failed])
    if not failed:
        return Feedback(True, "\n".join([f"All {len(cases)} tests pass.", *lines]))
    steps = ex.steps_for(failed)
    tries = max(1, failed_tries(key))  # this try included; 0 when the journal is /dev/null (a re-grade)
    shown = [s if s.startswith("Worked answer") else f"Hint {i + 1}: {s}" for i, s in enumerate(steps[:tries])]
    more = ["(Try again: each failed try shows one more step.)"] if tries < len(steps) else []
    return Feedback(False, "\n".join([f"{len(failed)} of {len(cases)} tests fail.", *lines, *shown, *more]),
                    failed[0].name)


def source_of(fn: Callable) -> str:
    """The submitted function's source, for the hand-in; a note when Python cannot find it (a lambda typed
    in a console, a built-in)."""
    try:
        return textwrap.dedent(inspect.getsource(fn))
    except (OSError, TypeError):
        return f"# source not available: {getattr(fn, '__qualname__', type(fn).__name__)} was not defined in a file"


def attempt(name: str, call: Callable[[], object], what: str = "raised") -> tuple[object, Case | None]:
    """Run the learner's code: (its value, None), or (None, a failed case naming what it raised).

    ``NotImplementedError`` passes through: :func:`check_code` reports a stub as "not written yet".
    """
    try:
        return call(), None
    except NotImplementedError:
        raise
    except Exception as err:  # noqa: BLE001 - the learner's code may raise anything; say what it raised
        return None, Case(name, False, f"{what} {type(err).__name__}: {err}")


def safely(name: str, call: Callable[[], object], expected: object, same: Callable[[object, object], bool]) -> Case:
    """One case: call the learner's code, compare with ``expected``; an exception is a failed case, named."""
    got, failed = attempt(name, call)
    if failed:
        return failed
    ok = same(got, expected)
    return Case(name, ok, "" if ok else f"expected {expected!r}, got {got!r}")
