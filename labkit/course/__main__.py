"""``python -m labkit.course``: the course tools from the command line.

    copies  [--src labs] [--dst my-labs]   student copies, never overwriting one (what `make lab` runs)
    update  [--src labs] [--dst my-labs]   the same, and a newer notebook version written beside the student's
    release DIR                             a student distribution: no stored outputs, no widget state, no key
    collect DIR [--out DIR] [--no-rerun] [--unsafe-rerun]
                                            a class's hand-ins, re-graded, into class.csv, items.csv, flags.csv,
                                            similarity.csv and class.json (in DIR, or --out, made if new)
    key [--out FILE] [--no-designs]         the instructor's answer key

Bad input (a missing folder, a file where a folder belongs) is one line on stderr and exit 2; so is an
instructor's command (release, collect, key) run from a student release, which leaves them out.
"""

from __future__ import annotations

import argparse
import sys
import types
from pathlib import Path

from labkit.course.copies import LABS, STUDENT_DIR, make_student_copies
from labkit.errors import LabkitError


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m labkit.course")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, what in (("copies", "make the student copies (outputs cleared), never overwriting one"),
                       ("update", "make missing copies, and write a newer version beside a student's own")):
        cp = sub.add_parser(name, help=what)
        cp.add_argument("--src", default=str(LABS))
        cp.add_argument("--dst", default=str(STUDENT_DIR))
    rel = sub.add_parser("release", help="a student distribution without outputs, widget state or instructor/")
    rel.add_argument("dir")
    col = sub.add_parser("collect", help="a class's hand-ins into one CSV and one JSON, re-graded")
    col.add_argument("dir")
    col.add_argument("--out", default=None, help="folder for the gradebook files (default: DIR; made if new)")
    col.add_argument("--no-rerun", action="store_true", help="do not re-run submitted code (not counted as passed)")
    col.add_argument("--unsafe-rerun", action="store_true",
                     help="where no sandbox works here, re-run submitted code unsandboxed, as yourself")
    col.add_argument("--timeout", type=float, default=120.0, help="seconds for one hand-in's code re-runs")
    key = sub.add_parser("key", help="the instructor's answer key")
    key.add_argument("--out", default=None, help="write it to this file (default: print it)")
    key.add_argument("--no-designs", action="store_true", help="skip the design tasks' search (the slow part)")
    return parser


def _instructor(name: str) -> types.ModuleType:
    """An instructor-only module, or one line saying that a student release leaves it out."""
    import importlib

    try:
        return importlib.import_module(f"labkit.course.{name}")
    except ModuleNotFoundError as err:
        if err.name and err.name.startswith("labkit.course"):
            raise LabkitError(f"{name} is an instructor's command: a student release leaves it out "
                              f"(no {err.name})") from None
        raise


def _run(a: argparse.Namespace) -> str:
    if a.command in ("copies", "update"):
        made = make_student_copies(Path(a.src), Path(a.dst), update=a.command == "update")
        line = f"student copies in {a.dst}: {len(made.created)} new, {len(made.kept)} kept as they were"
        return line + (f", {len(made.updated)} newer versions written beside them" if a.command == "update" else "")
    if a.command == "release":
        rel = _instructor("release").make_release(Path(a.dir))
        return f"student release in {a.dir}: {len(rel.notebooks)} notebooks, {len(rel.files)} files, no key"
    if a.command == "collect":
        collect = _instructor("collect").collect
        rows = collect(Path(a.dir), None if a.out is None else Path(a.out), not a.no_rerun, a.timeout,
                       unsafe=a.unsafe_rerun)
        flagged = sum(bool(r["flag_codes"]) for r in rows)
        where = a.out or a.dir
        return (f"{len(rows)} students in {where}/class.csv (items.csv, flags.csv, similarity.csv, class.json); "
                f"{flagged} with flags")
    answer_key = _instructor("key").answer_key
    out = None if a.out is None else Path(a.out)
    if out is not None and not out.parent.is_dir():
        raise LabkitError(f"out must be in an existing folder (no folder {str(out.parent)!r})")
    text = answer_key(designs=not a.no_designs)
    if out is None:
        return text
    out.write_text(text + "\n")
    return f"answer key written to {out}"


def main(argv: list[str] | None = None) -> int:
    a = _parser().parse_args(argv)
    try:
        print(_run(a))
    except LabkitError as err:
        print(f"labkit: error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
