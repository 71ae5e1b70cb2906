"""A coding exercise, its test cases and its check: what every exercise module of this package builds on."""


from __future__ import annotations

import inspect
import textwrap
from collections.abc import Callable
from dataclasses import dataclass

from labkit.errors import require_choice
from labkit.teach.feedback import Feedback
from labkit.teach.journal import record


@dataclass(frozen=True)
class Case:
    """One test of the learner's function: its name, whether it passed, and what was expected."""

    name: str
    ok: bool
    detail: str = ""


@dataclass(frozen=True)
class CodingExercise:
    key: str
    task: str  # what to write, with the signature
    run: Callable[..., list[Case]]  # the learner's function (and any measured inputs) -> cases
    hint: str  # the general hint: a direction, never the whole algorithm
    case_hints: tuple[tuple[str, str], ...] = ()  # (words in a case's name, the hint when that case fails)

    def hint_for(self, failed: list[Case]) -> str:
        """The hint of the first failed case that has one (what that case shows), else the general hint."""
        for case in failed:
            for words, hint in self.case_hints:
                if words in case.name:
                    return hint
        return self.hint


CODING: dict[str, CodingExercise] = {}


def register(ex: CodingExercise) -> None:
    CODING[ex.key] = ex


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
    head = f"All {len(cases)} tests pass." if not failed else (
        f"{len(failed)} of {len(cases)} tests fail. Hint: {ex.hint_for(failed)}")
    return Feedback(not failed, "\n".join([head, *lines]))


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
