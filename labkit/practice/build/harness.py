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
import json
import random
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from labkit.errors import LabkitError, require_choice
from labkit.practice.build.diagnosis import BadRecord
from labkit.practice.build.records import learner_frames, load_module  # noqa: F401 - the harness API, rank side
from labkit.practice.coding import Case, CodingExercise, register

STUBS = Path(__file__).resolve().parent / "stubs"
HIDDEN = Path(__file__).resolve().parents[3] / "instructor" / "build" / "hidden.json"  # not in the student release


@dataclass(frozen=True)
class BuildExercise:
    """One build-it exercise: the stub to copy, the task, the three sides of its check, the hints, the worked answer.

    The check is split by trust. ``draw(seed)`` (trusted) draws the run's parameters as plain data (world sizes,
    hyperparameters, shapes); ``collect(path, params)`` (UNTRUSTED: it starts the ranks that import the learner's
    module, :func:`labkit.practice.build.records.ranks`) returns a plain record of what the ranks executed and
    computed, with a learner's fault as a ``{"failure": ...}`` entry, never an exception; ``judge(record, params)``
    (trusted, in a process that never imports the learner's module) validates the record, computes the reference
    itself from ``params`` and returns the named cases.
    """

    key: str  # e.g. "02.build.zero1"
    stub: str  # template file name in labkit/practice/build/stubs/, e.g. "zero1.py"
    task: str  # what to write: the functions or classes and their signatures
    draw: Callable[[int], dict]  # seed -> the run's parameters (plain data)
    collect: Callable[[Path, dict], dict]  # (module path, params) -> record (plain data)
    judge: Callable[[dict, dict], list[Case]]  # (record, params) -> cases
    hint: tuple[str, ...] = ()  # general hint steps (a question, then a direction)
    worked: str = ""  # the worked answer in words


BUILDS: dict[str, BuildExercise] = {}


def register_build(ex: BuildExercise) -> None:
    """Register ``ex``, and a :class:`CodingExercise` under the same key for the journal, hints, key and collect."""
    if not (STUBS / ex.stub).is_file():
        raise LabkitError(f"stub must be a file in {STUBS} (no {ex.stub!r})")
    BUILDS[ex.key] = ex
    register(CodingExercise(ex.key, ex.task, lambda path, **_: cases_of(ex.key, Path(path)), ex.hint, ex.worked))


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


def draw_params(key: str, seed: int | None = None) -> dict:
    """Exercise ``key``'s run parameters for ``seed`` (a fresh random seed when None): plain data, with the seed."""
    require_choice("build exercise", key, BUILDS)
    ex = BUILDS[key]
    seed = random.SystemRandom().randrange(2**31) if seed is None else int(seed)
    return {**ex.draw(seed), "seed": seed}


def hidden_params(key: str, params: dict) -> list[dict]:
    """The hidden runs of ``key``: each override of ``instructor/build/hidden.json`` merged over ``params``."""
    require_choice("build exercise", key, BUILDS)
    if not HIDDEN.is_file():
        raise LabkitError(f"hidden cases need {HIDDEN} (the instructor's folder; not in the student release)")
    table = json.loads(HIDDEN.read_text())
    return [{**params, **override, "hidden": True} for override in table.get(key, [])]


def not_written(record: Any) -> str:
    """The learner's NotImplementedError message if any run of ``record`` stopped on one, else ""."""
    if isinstance(record, dict):
        failure = record.get("failure")
        if isinstance(failure, dict) and failure.get("kind") == "not_written":
            return str(failure.get("message", ""))[:300]
        return next((m for v in record.values() if (m := not_written(v))), "")
    if isinstance(record, list):
        return next((m for v in record if (m := not_written(v))), "")
    return ""


def collect_record(key: str, path: str | Path, params: dict) -> dict:
    """(UNTRUSTED side.) Run the learner's module at ``path`` with ``params``; the plain record the ranks wrote.

    A module still equal to its stub gives ``{"failure": {"kind": "not_written", ...}}`` without processes.
    """
    require_choice("build exercise", key, BUILDS)
    ex, path = BUILDS[key], Path(path)
    if is_blank(key, path.read_text(encoding="utf-8", errors="replace")):
        return {"failure": {"kind": "not_written", "message": f"{path.name} is still the stub"}}
    return ex.collect(path, params)


def judge_record(key: str, record: Any, params: dict) -> list[Case]:
    """(TRUSTED side.) The cases of ``record``: the exercise's judge, which computes its own reference.

    A record that is not what the ranks write (a missing field, a wrong type or shape, doubled entries) is one
    failed case naming what is wrong, never an exception.
    """
    require_choice("build exercise", key, BUILDS)
    ex = BUILDS[key]
    if not isinstance(record, dict):
        return [Case("the run's record is well-formed", False, f"a record is a dict (got {type(record).__name__})")]
    try:
        with torch.random.fork_rng():  # a judge seeds torch's RNG for its reference; the caller's stream stays
            return ex.judge(record, params)
    except (BadRecord, KeyError, IndexError, TypeError, ValueError, AttributeError, RuntimeError) as err:
        return [Case("the run's record is well-formed", False, f"malformed record: {type(err).__name__}: {err}")]


def cases_of(key: str, path: Path, seed: int | None = None, hidden: bool = False) -> list[Case]:
    """Every case of the module at ``path``: draw, collect, judge, for the visible run (and the hidden ones).

    Raises ``NotImplementedError`` when part of the module is still the stub's.
    """
    params = draw_params(key, seed)
    cases: list[Case] = []
    for i, p in enumerate([params, *(hidden_params(key, params) if hidden else [])]):
        record = collect_record(key, path, p)
        if message := not_written(record):
            raise NotImplementedError(message)
        got = judge_record(key, record, p)
        cases += got if i == 0 else [Case(f"hidden {i}: {c.name}", c.ok, c.detail, c.hints) for c in got]
    return cases
