"""Re-grade submitted code: its verdict is the sandbox's re-run, and a copy of the key is told from it fairly.

Each coding or build-it answer's source is run again in the sandbox (:mod:`labkit.course.sandbox`); the
re-run's verdict is the item's, whatever the hand-in says (a reply missing, doubled or not a bool is an
error: not passed). It is compared with the key's solution after normalising both
(:mod:`labkit.course.similarity`), only where the solution is long enough for a match to mean a copy.
"""

from __future__ import annotations

import ast
from pathlib import Path

from labkit.course import similarity
from labkit.course.copies import ROOT
from labkit.course.regrade import Flag
from labkit.course.sandbox import Rerun, run_submissions

KEY_FILE = ROOT / "instructor" / "key.py"
BUILD_KEYS = ROOT / "instructor" / "build"  # the build-it exercises' reference modules


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
