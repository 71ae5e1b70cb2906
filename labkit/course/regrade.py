"""Re-grade a hand-in from its own lines: every verdict labkit can recompute, recomputed here.

* self-checks and reasoning: the stored answer against the exercise's answer from labkit's model;
* predictions: the stored guess against the revealed value, with the registry's tolerance;
* design tasks: the stored panel settings set on a fresh panel, and the task's check run;
* the capstone: the stored layout graded again by the advisor;
* coding and build-it: the submitted source run again in the sandbox (:mod:`labkit.course.sandbox`); its
  verdict is the re-run's, whatever the hand-in says; compared with the key's solution after normalising
  both (:mod:`labkit.course.similarity`), only where the solution is long enough for a match to mean a copy.

Each disagreement is a :class:`Flag` with a code (:data:`CODES`) and a message naming the record.
"""

from __future__ import annotations

import ast
import contextlib
import importlib
import io
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from labkit.course import similarity
from labkit.course.copies import ROOT
from labkit.course.sandbox import Rerun, run_submissions
from labkit.teach import journal, prediction_mistakes

TOPICS = ("storage", "inter_layer", "intra_layer", "offload", "reduction", "resilience", "economics", "future",
          "advisor")
KEY_FILE = ROOT / "instructor" / "key.py"
BUILD_KEYS = ROOT / "instructor" / "build"  # the build-it exercises' reference modules

CODES = {
    "CHAIN_BREAK": "the journal's hash chain shows a line deleted, moved or edited, or no chain at all",
    "NOT_ENTRIES": "lines of the hand-in that are not journal entries",
    "SUMMARY_EDITED": "the stored summary is not what the hand-in's own lines give",
    "DIGEST": "the digest does not match the file (edited after export)",
    "MALFORMED": "a hand-in or an item labkit cannot read; graded as not answered",
    "UNKNOWN_ITEM": "an item this labkit does not have",
    "REGRADED": "a stored verdict that labkit's re-grade does not give",
    "DESIGN_UNCONFIRMED": "a design or capstone stored as met that labkit's check does not confirm",
    "RERUN_DIFFERS": "submitted code whose re-run verdict differs from the stored one",
    "RERUN_ERROR": "submitted code that could not be re-run (a timeout, no verdict, a malformed reply)",
    "NOT_RERUN": "submitted code not re-run (collect --no-rerun): not counted as passed",
    "KEY_COPY": "a long solution that is the key's once names, docstrings, comments and annotations are dropped",
    "DUPLICATE": "an item handed in in more than one file: the first file's counts",
}


@dataclass(frozen=True)
class Flag:
    """One record whose stored verdict or origin is not what it claims: a code from :data:`CODES`, a message."""

    key: str
    what: str
    code: str = "REGRADED"

    def __str__(self) -> str:
        return f"{self.key}: {self.what}" if self.key else self.what


def exercises() -> dict:
    for topic in TOPICS:
        importlib.import_module(f"labkit.{topic}.exercises")
    import labkit.practice  # noqa: F401 - registers the reasoning exercises
    from labkit.teach import checks

    return checks.EXERCISES


def _number(x: object) -> float | None:
    if isinstance(x, bool):
        return None
    try:
        value = float(x)
    except (TypeError, ValueError, OverflowError):
        return None
    return value if math.isfinite(value) else None


def exercise_ok(e: journal.Entry) -> bool | None:
    """The re-graded verdict of one self-check or reasoning try (None: no such exercise here)."""
    known = exercises()
    if e.key not in known:
        return None
    ex, value = known[e.key], _number(e.answer)
    right = ex.answer()
    return value is not None and abs(value - right) <= ex.rel_tol * abs(right) + 1e-12


def exercise_flags(entries: list[journal.Entry]) -> list[Flag]:
    """Self-check and reasoning tries whose stored verdict labkit's model does not give."""
    flags = []
    for e in entries:
        if e.kind not in ("exercise", "reasoning") or e.event != "try":
            continue
        ok = exercise_ok(e)
        if ok is None:
            flags.append(Flag(e.key, "no such exercise in this labkit", "UNKNOWN_ITEM"))
        elif ok != bool(e.ok):
            right = exercises()[e.key].answer()
            flags.append(Flag(e.key, f"stored {'right' if e.ok else 'wrong'} for {e.answer!r}, re-graded "
                                     f"{'right' if ok else 'wrong'} (answer {right:.6g})"))
    return flags


def reveal_ok(e: journal.Entry) -> bool:
    """Whether a reveal's guess is right against the value revealed with it, judged by the registry's tolerance."""
    truth = e.detail.get("truth")
    if isinstance(truth, int | float) and not isinstance(truth, bool):
        g = _number(e.answer)
        rules = prediction_mistakes.judging(e.key)  # the registry's tolerance, not the one the hand-in stores
        if rules is not None:
            tol = 0.0 if rules.exact else rules.rel_tol
        else:
            tol = 0.0 if e.detail.get("exact") else (_number(e.detail.get("rel_tol", 0.1)) or 0.0)
        return g is not None and (g == truth if tol == 0 or truth == 0 else abs(g - truth) <= tol * abs(truth))
    if isinstance(truth, dict):
        return isinstance(e.answer, dict) and all(e.answer.get(k) == v for k, v in truth.items())
    return e.answer == truth


def prediction_flags(entries: list[journal.Entry]) -> list[Flag]:
    """Reveals whose stored verdict does not follow from the guess and the value revealed with it."""
    flags = []
    for e in entries:
        if e.kind == "prediction" and e.event == "reveal" and reveal_ok(e) != bool(e.ok):
            ok = not e.ok
            flags.append(Flag(e.key, f"stored {'right' if e.ok else 'wrong'} for the guess {e.answer!r}, but it is "
                                     f"{'right' if ok else 'wrong'} against {e.detail.get('truth')!r}"))
    return flags


_MET: dict[tuple[str, str], tuple[bool | None, str]] = {}


@contextlib.contextmanager
def quiet_panels() -> Iterator[None]:
    """Panels made outside a notebook: what their output widget prints (``ESC[2K`` and each figure's repr,
    the 113 lines the key once started with) kept off stdout, and the pyplot figures they opened closed."""
    import matplotlib.pyplot as plt

    before = set(plt.get_fignums())
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            yield
    finally:
        for num in set(plt.get_fignums()) - before:
            plt.close(num)


def design_met(e: journal.Entry) -> tuple[bool | None, str]:
    """Whether a design try's (or the capstone's) stored settings meet the task again here; None and why when
    they cannot be set. Cached: a class hands in the same settings many times."""
    from labkit.errors import LabkitError
    from labkit.practice import design

    marker = (e.key, repr(e.answer))
    if marker not in _MET:
        try:
            if e.kind == "capstone":
                from labkit.advisor import capstone

                _MET[marker] = bool(capstone.grade(e.answer)), ""
            else:
                _goal, check, make = design.TASKS[e.key[:2]]
                with quiet_panels():
                    panel = make()
                    panel.set_values(**e.answer)
                    _MET[marker] = bool(check(panel)[0]), ""
        except (LabkitError, KeyError, AttributeError, TypeError, ValueError) as err:
            _MET[marker] = None, str(err)
    return _MET[marker]


def design_flags(entries: list[journal.Entry]) -> list[Flag]:
    """Design checks stored as met (and the capstone within budget) that labkit does not confirm."""
    flags, seen = [], set()
    for e in entries:
        if e.event != "try" or not e.ok or e.kind not in ("design", "capstone") or (e.key, repr(e.answer)) in seen:
            continue
        seen.add((e.key, repr(e.answer)))
        met, why = design_met(e)
        if met is None:
            flags.append(Flag(e.key, f"stored settings {e.answer!r} cannot be set again ({why})", "MALFORMED"))
        elif not met:
            flags.append(Flag(e.key, f"stored as met with {e.answer!r}, but labkit's check says not met",
                              "DESIGN_UNCONFIRMED"))
    return flags


def key_solutions(path: Path = KEY_FILE) -> dict[str, str]:
    """Exercise id -> the source of the key's solution, read (never imported) from key.py."""
    if not Path(path).is_file():
        return {}
    text = Path(path).read_text()
    tree = ast.parse(text)
    sources = {n.name: ast.get_source_segment(text, n) or "" for n in tree.body if isinstance(n, ast.FunctionDef)}
    names = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "REFERENCES" for t in node.targets):
            if isinstance(node.value, ast.Dict):
                names = {k.value: v.id for k, v in zip(node.value.keys, node.value.values, strict=True)
                         if isinstance(k, ast.Constant) and isinstance(v, ast.Name)}  # fmt: skip
    return {key: sources[name] for key, name in names.items() if name in sources}


def build_solutions(folder: Path = BUILD_KEYS) -> dict[str, str]:
    """Build-it key -> the source of its reference module in ``instructor/build/`` (read, never imported)."""
    from labkit.practice.build import BUILDS

    return {key: (Path(folder) / ex.stub).read_text() for key, ex in BUILDS.items()
            if (Path(folder) / ex.stub).is_file()}  # fmt: skip


def copy_flags(sources: dict[str, str]) -> list[Flag]:
    """Submitted sources (``{key: source}``) that are the key's solution once normalised, where that means a copy."""
    modules = build_solutions()
    keys = key_solutions() | modules
    return [Flag(k, f"the submitted {'module' if k in modules else 'source'} is the instructor key's solution "
                    "with only names, docstrings, comments, annotations or layout changed", "KEY_COPY")
            for k, src in sources.items() if k in keys and similarity.is_key_copy(src, keys[k])]  # fmt: skip


def rerun(items: list[dict], timeout_s: float = 120.0, unsafe: bool = False) -> dict[str, Rerun]:
    """Each item's re-run verdict, by key: a reply for a key not asked is ignored; an item with no reply, two
    replies or a verdict that is not a bool is an error (``ok=None``: not passed), never a crash."""
    if not items:
        return {}
    kwargs = {"unsafe": True} if unsafe else {}
    replies = run_submissions(items, timeout_s, **kwargs)
    wanted, out, seen = {i["key"] for i in items}, {}, {}
    for r in replies if isinstance(replies, list) else []:
        key = getattr(r, "key", None)
        if key not in wanted:
            continue
        seen[key] = seen.get(key, 0) + 1
        ok = getattr(r, "ok", None)
        out[key] = Rerun(key, ok if isinstance(ok, bool) else None, str(getattr(r, "message", "") or ""))
    for key, n in seen.items():
        if n > 1:
            out[key] = Rerun(key, None, f"the sandbox gave {n} verdicts for it: none counts")
    return {i["key"]: out.get(i["key"], Rerun(i["key"], None, "the sandbox gave no verdict for it")) for i in items}


def coding_items(summary: dict) -> tuple[list[dict], list[Flag]]:
    """The coding and build-it answers to re-run (``{"key", "function", "source"}``), and those that cannot be."""
    items, flags = [], []
    for k, v in summary.get("items", {}).items():
        if not isinstance(v, dict) or v.get("kind") != "coding" or not v.get("tries"):
            continue
        source, function = v.get("source", ""), v.get("function")
        if not isinstance(source, str) or not (function is None or isinstance(function, str)):
            flags.append(Flag(k, "its source is not text: not re-run, not passed", "MALFORMED"))
            continue
        items.append({"key": k, "function": function, "source": source})
    return items, flags


def regrade_code(summary: dict, timeout_s: float = 120.0, unsafe: bool = False
                 ) -> tuple[list[Flag], dict[str, Rerun]]:
    """Run each coding answer's source again in the sandbox: the flags (a changed verdict, a copy of the key,
    an error, a source that is not text) and the re-run's verdicts by key."""
    items, flags = coding_items(summary)
    flags += copy_flags({i["key"]: i["source"] for i in items})
    reruns = rerun(items, timeout_s, unsafe)
    for key, r in reruns.items():
        stored = bool(summary["items"][key].get("ever_right"))
        if r.ok is None:
            flags.append(Flag(key, f"could not be re-run: {r.message}", "RERUN_ERROR"))
        elif r.ok != stored:
            first = r.message.splitlines()[0] if r.message else ""
            flags.append(Flag(key, f"stored {'passing' if stored else 'failing'}, re-run "
                                   f"{'passes' if r.ok else 'fails'} ({first})", "RERUN_DIFFERS"))
    return flags, reruns


def coding_flags(summary: dict, timeout_s: float = 120.0, unsafe: bool = False
                 ) -> tuple[list[Flag], dict[str, bool | None]]:
    """:func:`regrade_code`'s flags, and its verdicts as bools (None: it could not be re-run)."""
    flags, reruns = regrade_code(summary, timeout_s, unsafe)
    return flags, {k: r.ok for k, r in reruns.items()}
