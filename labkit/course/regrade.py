"""Re-grade a hand-in from its own lines: every verdict labkit can recompute, recomputed here.

* self-checks and reasoning: the stored answer against the exercise's answer from labkit's model;
* predictions: the stored guess against the revealed value and tolerance stored with it;
* design tasks: the stored panel settings set on a fresh panel, and the task's check run;
* the capstone: the stored layout graded again by the advisor;
* coding: the submitted source run again in a sandboxed child (:mod:`labkit.course.sandbox`), and
  compared with the instructor key's solution (a copy of the key is recognised by its syntax tree);
  a build-it module is written to a file in the sandbox and run again on real process groups, and
  compared, whole, with its reference in ``instructor/build/``.

Each disagreement is a flag, one line naming the record and what differs.
"""

from __future__ import annotations

import ast
import importlib
import math
from dataclasses import dataclass
from pathlib import Path

from labkit.course.copies import ROOT
from labkit.course.sandbox import run_submissions
from labkit.teach import journal, prediction_mistakes

TOPICS = ("storage", "inter_layer", "intra_layer", "offload", "reduction", "resilience", "economics", "future",
          "advisor")
KEY_FILE = ROOT / "instructor" / "key.py"
BUILD_KEYS = ROOT / "instructor" / "build"  # the build-it exercises' reference modules


@dataclass(frozen=True)
class Flag:
    """One record whose stored verdict or origin is not what it claims."""

    key: str
    what: str

    def __str__(self) -> str:
        return f"{self.key}: {self.what}"


def exercises() -> dict:
    for topic in TOPICS:
        importlib.import_module(f"labkit.{topic}.exercises")
    import labkit.practice  # noqa: F401 - registers the reasoning exercises
    from labkit.teach import checks

    return checks.EXERCISES


def _number(x: object) -> float | None:
    try:
        value = float(x)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def exercise_flags(entries: list[journal.Entry]) -> list[Flag]:
    """Self-check and reasoning tries whose stored verdict labkit's model does not give."""
    known, flags = exercises(), []
    for e in entries:
        if e.kind not in ("exercise", "reasoning") or e.event != "try":
            continue
        if e.key not in known:
            flags.append(Flag(e.key, "no such exercise in this labkit"))
            continue
        ex, value = known[e.key], _number(e.answer)
        right = ex.answer()
        ok = value is not None and abs(value - right) <= ex.rel_tol * abs(right) + 1e-12
        if ok != bool(e.ok):
            flags.append(Flag(e.key, f"stored {'right' if e.ok else 'wrong'} for {e.answer!r}, re-graded "
                                     f"{'right' if ok else 'wrong'} (answer {right:.6g})"))
    return flags


def prediction_flags(entries: list[journal.Entry]) -> list[Flag]:
    """Reveals whose stored verdict does not follow from the guess and the value revealed with it."""
    flags = []
    for e in entries:
        if e.kind != "prediction" or e.event != "reveal":
            continue
        truth = e.detail.get("truth")
        if isinstance(truth, int | float) and not isinstance(truth, bool):
            g = _number(e.answer)
            rules = prediction_mistakes.judging(e.key)  # the registry's tolerance, not the one the hand-in stores
            if rules is not None:
                tol = 0.0 if rules.exact else rules.rel_tol
            else:
                tol = 0.0 if e.detail.get("exact") else float(e.detail.get("rel_tol", 0.1))
            ok = g is not None and (g == truth if tol == 0 or truth == 0 else abs(g - truth) <= tol * abs(truth))
        elif isinstance(truth, dict):
            ok = isinstance(e.answer, dict) and all(e.answer.get(k) == v for k, v in truth.items())
        else:
            ok = e.answer == truth
        if ok != bool(e.ok):
            flags.append(Flag(e.key, f"stored {'right' if e.ok else 'wrong'} for the guess {e.answer!r}, but it is "
                                     f"{'right' if ok else 'wrong'} against {truth!r}"))
    return flags


def design_flags(entries: list[journal.Entry]) -> list[Flag]:
    """Design checks stored as met (and the capstone within budget) that labkit does not confirm."""
    from labkit.errors import LabkitError
    from labkit.practice import design

    flags, seen = [], set()
    for e in entries:
        if e.event != "try" or not e.ok or e.kind not in ("design", "capstone"):
            continue
        marker = (e.key, repr(e.answer))
        if marker in seen:
            continue
        seen.add(marker)
        try:
            if e.kind == "capstone":
                from labkit.advisor import capstone

                met = bool(capstone.grade(e.answer))
            else:
                nb = e.key[:2]
                _goal, check, make = design.TASKS[nb]
                panel = make()
                panel.set_values(**e.answer)
                met = check(panel)[0]
        except (LabkitError, KeyError, AttributeError, TypeError) as err:
            flags.append(Flag(e.key, f"stored settings {e.answer!r} cannot be set again ({err})"))
            continue
        if not met:
            flags.append(Flag(e.key, f"stored as met with {e.answer!r}, but labkit's check says not met"))
    return flags


def _normal(source: str) -> str | None:
    """The function's syntax tree without its name and docstring: equal for a copy, whatever it is called."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    fns = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
    if not fns:
        return None
    fn = fns[-1]
    body = fn.body[1:] if fn.body and isinstance(fn.body[0], ast.Expr) and isinstance(
        getattr(fn.body[0], "value", None), ast.Constant) else fn.body  # fmt: skip
    return ast.dump(ast.Module(body=body, type_ignores=[]), annotate_fields=False)


def key_solutions(path: Path = KEY_FILE) -> dict[str, str]:
    """Exercise id -> the normalised syntax tree of the key's solution, read (never imported) from key.py."""
    if not Path(path).is_file():
        return {}
    tree = ast.parse(Path(path).read_text())
    sources = {n.name: ast.get_source_segment(Path(path).read_text(), n) for n in tree.body
               if isinstance(n, ast.FunctionDef)}  # fmt: skip
    names = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "REFERENCES" for t in node.targets):
            if isinstance(node.value, ast.Dict):
                names = {k.value: v.id for k, v in zip(node.value.keys, node.value.values, strict=True)
                         if isinstance(k, ast.Constant) and isinstance(v, ast.Name)}  # fmt: skip
    return {key: _normal(sources[name]) for key, name in names.items() if name in sources}


def build_solutions(folder: Path = BUILD_KEYS) -> dict[str, str | None]:
    """Build-it key -> the normalised syntax tree of its reference module in ``instructor/build/`` (read, never
    imported)."""
    from labkit.practice.build import BUILDS
    from labkit.practice.build.harness import normal_source

    return {key: normal_source((Path(folder) / ex.stub).read_text()) for key, ex in BUILDS.items()
            if (Path(folder) / ex.stub).is_file()}  # fmt: skip


def coding_flags(summary: dict, timeout_s: float = 120.0) -> tuple[list[Flag], dict[str, bool | None]]:
    """Run each coding answer's source again (sandboxed; a build-it module on real ranks inside it); flag a
    changed verdict or a copy of the key (a function's syntax tree, or a whole module's for build-it)."""
    from labkit.practice.build.harness import normal_source

    items = [{"key": k, "function": v.get("function"), "source": v.get("source", "")}
             for k, v in summary.get("items", {}).items() if v.get("kind") == "coding" and v.get("tries")]
    flags, verdicts = [], {}
    solutions = key_solutions()
    modules = build_solutions()
    for item in items:
        if item["key"] in modules:
            if modules[item["key"]] is not None and normal_source(item["source"] or "") == modules[item["key"]]:
                flags.append(Flag(item["key"], "the submitted module is the instructor key's reference solution"))
            continue
        mine = _normal(item["source"] or "")
        if mine is not None and mine == solutions.get(item["key"]):
            flags.append(Flag(item["key"], "the submitted source is the instructor key's solution"))
    for rerun, item in zip(run_submissions(items, timeout_s), items, strict=True):
        verdicts[rerun.key] = rerun.ok
        stored = bool(summary["items"][item["key"]].get("ever_right"))
        if rerun.ok is None:
            flags.append(Flag(rerun.key, f"could not be re-run: {rerun.message}"))
        elif rerun.ok != stored:
            first = rerun.message.splitlines()[0] if rerun.message else ""
            flags.append(Flag(rerun.key, f"stored {'passing' if stored else 'failing'}, re-run "
                                         f"{'passes' if rerun.ok else 'fails'} ({first})"))
    return flags, verdicts
