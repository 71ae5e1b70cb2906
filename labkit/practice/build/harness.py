"""The "build it yourself" harness: the learner writes a whole component in a module file, the lab runs it on
real process groups and grades it like a course would (per-task cases, the typical bugs named, stepped hints).

A build exercise differs from a :class:`~labkit.practice.coding.CodingExercise` in one way: what the learner hands
in is a *module* (a ``.py`` file beside the notebook, copied from a stub by :func:`open_stub`), not a function,
because the component runs inside spawned ranks (:mod:`labkit.dist`), and spawn cannot pickle a function a
notebook defined. Each rank receives the module's PATH and loads it itself with :func:`load_module`. The grading
functions of the exercises live in importable labkit modules for the same reason.

The style follows minitorch (stubs whose functions raise ``NotImplementedError``, one named test per task) and
Stanford CS336's second assignment (write the sharded optimizer, then benchmark it against the real engine).
"""

from __future__ import annotations

import ast
import importlib.util
import itertools
import shutil
import sys
import types
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from labkit import dist as ldist
from labkit.errors import LabkitError, require_choice
from labkit.practice.coding import Case, CodingExercise, failed_tries, register
from labkit.teach.feedback import Feedback
from labkit.teach.journal import record

STUBS = Path(__file__).resolve().parent / "stubs"
_loaded = itertools.count()


@dataclass(frozen=True)
class BuildExercise:
    """One build-it exercise: the stub to copy, the task, the graded run, the general hints, the worked answer."""

    key: str  # e.g. "02.build.zero1"
    stub: str  # template file name in labkit/practice/build/stubs/, e.g. "zero1.py"
    task: str  # what to write: the functions or classes and their signatures
    run: Callable[[Path], list[Case]]  # the learner's module path -> cases (runs real process groups)
    hint: tuple[str, ...]  # general hint steps (a question, then a direction)
    worked: str  # the worked answer in words


BUILDS: dict[str, BuildExercise] = {}


def register_build(ex: BuildExercise) -> None:
    """Register ``ex``, and a :class:`CodingExercise` under the same key for the journal, hints, key and collect."""
    if not (STUBS / ex.stub).is_file():
        raise LabkitError(f"stub must be a file in {STUBS} (no {ex.stub!r})")
    BUILDS[ex.key] = ex
    register(CodingExercise(ex.key, ex.task, lambda path, **_: ex.run(Path(path)), ex.hint, ex.worked))


def open_stub(key: str, folder: str | Path = ".") -> Path:
    """Copy exercise ``key``'s stub to ``folder/build/<stub>`` once (never over the learner's work); its path."""
    require_choice("build exercise", key, BUILDS)
    folder = Path(folder)
    if not folder.is_dir():
        raise LabkitError(f"folder must be an existing folder (no folder {str(folder)!r})")
    target = folder / "build" / BUILDS[key].stub
    if not target.exists():
        target.parent.mkdir(exist_ok=True)
        shutil.copyfile(STUBS / BUILDS[key].stub, target)
    return target


def load_module(path: str | Path) -> types.ModuleType:
    """Import the learner's module from its file under a fresh name (a re-run after an edit sees the edit)."""
    path = Path(path)
    if path.suffix != ".py" or not path.is_file():
        raise LabkitError(f"path must be an existing .py file (got {str(path)!r})")
    name = f"labkit_build_{path.stem}_{next(_loaded)}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise LabkitError(f"path must be a Python module (cannot load {str(path)!r})")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and pickling look the module up by name
    spec.loader.exec_module(module)
    return module


def normal_source(source: str) -> str | None:
    """The module's syntax tree without docstrings: equal for a copy, whatever its comments and layout."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) and isinstance(
                body[0].value, ast.Constant) and isinstance(body[0].value.value, str):  # fmt: skip
            node.body = body[1:] or [ast.Pass()]
    return ast.dump(tree, annotate_fields=False)


def is_blank(key: str, source: str) -> bool:
    """Whether ``source`` is still the stub as handed out (nothing written yet)."""
    mine = normal_source(source)
    return mine is not None and mine == normal_source((STUBS / BUILDS[key].stub).read_text())


def learner_frames(remote_traceback: str, path: str | Path) -> str:
    """The traceback lines inside the learner's file: where in THEIR code it raised."""
    name = Path(path).name
    lines = remote_traceback.splitlines()
    picked = [f"{ln.strip()} -> {lines[i + 1].strip()}" for i, ln in enumerate(lines[:-1])
              if name in ln and "File" in ln]  # fmt: skip
    return "; ".join(picked[-2:])


def launch(fn: Callable[..., Any], world_size: int, path: str | Path, *, timeout: float = 40.0,
           what: str = "runs", **kwargs: Any) -> tuple[list[Any] | None, Case | None]:
    """Run the rank function ``fn(rank, world_size, path=..., **kwargs)``: (per-rank results, None) or
    (None, a failed case naming what the learner's code raised or where the ranks hung).

    A stub's ``NotImplementedError`` inside a rank comes back as ``NotImplementedError`` here, so
    :func:`check_build` says "not written yet".
    """
    try:
        return ldist.run(fn, world_size, timeout=timeout, path=str(path), **kwargs), None
    except ldist.WorkerError as err:
        if "NotImplementedError" in str(err):
            raise NotImplementedError(str(err)) from None
        where = learner_frames(err.remote_traceback, path)
        return None, Case(f"{what} on {world_size} ranks", False, f"{err}" + (f" (at {where})" if where else ""))
    except ldist.WorkerTimeout as err:
        return None, Case(f"{what} on {world_size} ranks within {timeout:g} s", False, str(err))


def _feedback(ex: BuildExercise, key: str, cases: list[Case]) -> Feedback:
    failed = [c for c in cases if not c.ok]
    lines = [f"{'pass' if c.ok else 'FAIL'}  {c.name}" + (f": {c.detail}" if c.detail and not c.ok else "")
             for c in cases]  # fmt: skip
    if not failed:
        return Feedback(True, "\n".join([f"All {len(cases)} tests pass.", *lines]))
    from labkit.practice.coding import CODING

    steps = CODING[key].steps_for(failed)
    tries = max(1, failed_tries(key))  # this try included; 0 when the journal is /dev/null (a re-grade)
    shown = [s if s.startswith("Worked answer") else f"Hint {i + 1}: {s}" for i, s in enumerate(steps[:tries])]
    more = ["(Try again: each failed try shows one more step.)"] if tries < len(steps) else []
    return Feedback(False, "\n".join([f"{len(failed)} of {len(cases)} tests fail.", *lines, *shown, *more]),
                    failed[0].name)


def check_build(key: str, path: str | Path) -> Feedback:
    """Grade the learner's module at ``path`` for exercise ``key`` on real process groups; record the try.

    The journal records the module's source and path with the verdict (that is what the hand-in carries and
    what ``python -m labkit.course collect`` re-runs); hints escalate one step per failed try, as
    :func:`labkit.practice.coding.check_code` does. A module still equal to its stub is "not written yet"
    at once, without starting any process.
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
        cases = ex.run(path)
    except NotImplementedError as err:
        return Feedback(False, f"Not written yet: part of {path.name} still raises NotImplementedError ({err}). "
                               f"{ex.task}")
    except SyntaxError as err:
        cases = [Case("the module imports", False, f"SyntaxError: {err}")]
    fb = _feedback(ex, key, cases)
    failed = [c.name for c in cases if not c.ok]
    record("coding", key, path.name, fb.ok, "; ".join(failed), source=source, path=str(path.resolve()),
           failed=failed)
    return fb
