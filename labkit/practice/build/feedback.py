"""What a learner reads after a build-it check: the cases, then hints keyed to the bug found, one more per try.

The try is written to the journal BEFORE the hints are chosen, as :func:`labkit.practice.coding.check_code`
does, so the failed-try count includes this try: try 1 shows hint 1, try 2 hints 1-2, try 3 the worked answer.
"""

from __future__ import annotations

from pathlib import Path

from labkit.errors import LabkitError, require_choice
from labkit.practice.build.harness import BUILDS, cases_of, is_blank
from labkit.practice.coding import CODING, Case, failed_tries
from labkit.teach.feedback import Feedback
from labkit.teach.journal import record


def feedback(key: str, cases: list[Case]) -> Feedback:
    """The message for ``cases``: pass/FAIL lines, then the failed cases' hint steps up to this try's count."""
    failed = [c for c in cases if not c.ok]
    lines = [f"{'pass' if c.ok else 'FAIL'}  {c.name}" + (f": {c.detail}" if c.detail else "")
             for c in cases]  # fmt: skip (a passing case's detail: a shown figure and why it differs)
    if not failed:
        return Feedback(True, "\n".join([f"All {len(cases)} tests pass.", *lines]))
    steps = CODING[key].steps_for(failed)
    tries = max(1, failed_tries(key))  # this try included (recorded first); 0 when the journal is /dev/null
    shown = [s if s.startswith("Worked answer") else f"Hint {i + 1}: {s}" for i, s in enumerate(steps[:tries])]
    more = ["(Try again: each failed try shows one more step.)"] if tries < len(steps) else []
    return Feedback(False, "\n".join([f"{len(failed)} of {len(cases)} tests fail.", *lines, *shown, *more]),
                    failed[0].name)


def check_build(key: str, path: str | Path, *, seed: int | None = None, hidden: bool = False) -> Feedback:
    """Grade the learner's module at ``path`` for exercise ``key`` on real process groups; record the try.

    Draws the run's parameters (``seed``: None draws afresh), collects what the learner's ranks executed,
    judges it here against a reference this process computes itself, and with ``hidden`` adds the instructor's
    hidden runs (``instructor/build/hidden.json``). The journal records the module's source and path with the
    verdict (what the hand-in carries and what ``python -m labkit.course collect`` re-runs). A module still equal
    to its stub is "not written yet" at once, without starting any process.
    """
    require_choice("build exercise", key, BUILDS)
    ex, path = BUILDS[key], Path(path)
    if path.suffix != ".py" or not path.is_file():
        raise LabkitError(f"path must be the exercise's .py file (no file {str(path)!r}); open_stub({key!r}) "
                          "makes it")
    source = path.read_text(encoding="utf-8", errors="replace")
    if is_blank(key, source):
        return Feedback(False, f"Not written yet: {path.name} is still the stub. {ex.task}")
    try:
        cases = cases_of(key, path, seed=seed, hidden=hidden)
    except NotImplementedError as err:
        return Feedback(False, f"Not written yet: part of {path.name} still raises NotImplementedError ({err}). "
                               f"{ex.task}")
    except SyntaxError as err:
        cases = [Case("the module imports", False, f"SyntaxError: {err}")]
    failed = [c.name for c in cases if not c.ok]
    record("coding", key, path.name, not failed, "; ".join(failed), source=source, path=str(path.resolve()),
           failed=failed)
    return feedback(key, cases)
