"""Coding exercises: the learner writes the heart of a technique, and the lab runs real tests on it.

A :class:`CodingExercise` holds the task and a ``run`` function that takes the learner's
function and returns one :class:`Case` per test, each checked against a real measurement
where one exists (the student's bytes-per-category function against a real training
step, for instance), so the exercise cannot be passed by matching a printed number.
``check_code(key, fn)`` returns the same ``Feedback`` as the numeric checks: right when
every case passes, otherwise the failing cases with what was expected. A stub that
still raises ``NotImplementedError`` (or returns None) is "not written yet".

Reference solutions live in the instructor key (``instructor/key.py``), outside the
package; the tests check that each reference passes and each blank stub fails.
This package sits on the top floor, beside the advisor: it may read any topic.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from labkit.checks import Feedback
from labkit.course import record
from labkit.errors import require_choice


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
    hint: str


CODING: dict[str, CodingExercise] = {}


def register(ex: CodingExercise) -> None:
    CODING[ex.key] = ex


def check_code(key: str, fn: Callable | None, **measured: object) -> Feedback:
    """Run exercise ``key``'s real tests on ``fn``; ``measured`` passes results the notebook already measured."""
    _load()
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
    record("coding", key, getattr(fn, "__name__", "fn"), not failed, "; ".join(c.name for c in failed))
    head = f"All {len(cases)} tests pass." if not failed else (
        f"{len(failed)} of {len(cases)} tests fail. Hint: {ex.hint}")
    return Feedback(not failed, "\n".join([head, *lines]))


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


def _load() -> None:
    from labkit.practice import (  # noqa: F401 - importing them registers their exercises
        checkpoint,
        eviction,
        footprint,
        layout,
        loss_scale,
        pipeline,
        reasoning,
        storage,
        swapping,
        tensor_parallel,
    )
