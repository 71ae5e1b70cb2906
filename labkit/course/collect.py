"""Collect a class's hand-ins into one table: one row per student, stable columns, every record re-graded.

``collect(folder)`` reads each ``*.json`` under the folder as JSON (never anything else: no
pickle, no import), checks that its summary is the one its journal lines give and that its
digest holds (:mod:`labkit.teach.handin`), that its journal's hash chain is whole
(:func:`labkit.teach.journal.verify`: a line deleted, moved or edited before the export),
re-grades what labkit can (:mod:`labkit.course.regrade`), and writes ``class.csv`` (one row per
student, the columns of :data:`COLUMNS`) and ``class.json`` (every student's items and flags).
"""

from __future__ import annotations

import csv
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from labkit.course import regrade
from labkit.errors import LabkitError
from labkit.teach import handin, journal

COLUMNS = ("student", "files", "notebooks", "labkit_versions", "predictions_registered", "predictions_committed",
           "predictions_right", "predictions_no_guess", "exercises_right", "exercises_tries", "reasoning_right",
           "reasoning_tries", "coding_passed", "coding_tries", "design_met", "capstone_met", "flags")


@dataclass
class Student:
    """One student's hand-ins, merged: totals summed over notebooks, flags from every file."""

    name: str
    files: list[str] = field(default_factory=list)
    versions: set[str] = field(default_factory=set)
    summaries: list[dict] = field(default_factory=list)
    flags: list[str] = field(default_factory=list)

    def row(self) -> dict[str, object]:
        t: dict[str, dict] = {}
        books: set[str] = set()
        for s in self.summaries:
            books |= set(s.get("notebooks", []))
            for kind, counts in s.get("totals", {}).items():
                for name, n in counts.items():
                    t.setdefault(kind, {}).setdefault(name, 0)
                    t[kind][name] += n if isinstance(n, int) else 0

        def g(kind: str, name: str) -> int:
            return t.get(kind, {}).get(name, 0)

        return {"student": self.name, "files": ";".join(self.files), "notebooks": ";".join(sorted(books)),
                "labkit_versions": ";".join(sorted(self.versions)),
                "predictions_registered": g("predictions", "registered"),
                "predictions_committed": g("predictions", "committed"), "predictions_right": g("predictions", "right"),
                "predictions_no_guess": g("predictions", "no_guess"), "exercises_right": g("exercise", "right"),
                "exercises_tries": g("exercise", "tries"), "reasoning_right": g("reasoning", "right"),
                "reasoning_tries": g("reasoning", "tries"), "coding_passed": g("coding", "right"),
                "coding_tries": g("coding", "tries"), "design_met": g("design", "right"),
                "capstone_met": g("capstone", "right"), "flags": " | ".join(self.flags)}


def _load(path: Path) -> dict | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    return data if isinstance(data, dict) and data.get("format") == handin.FORMAT else None


def integrity_flags(data: dict, summary: dict | None = None) -> list[str]:
    """Whether the stored summary is what the stored lines give, and the digest still holds (``summary``: those
    lines' summary when the caller has computed it already)."""
    lines = data.get("entries") if isinstance(data.get("entries"), list) else []
    entries = journal.parse([json.dumps(x) for x in lines])
    flags = []
    if len(entries) != len(lines):
        flags.append(f"{len(lines) - len(entries)} journal lines are not journal entries")
    summary = dict(summary if summary is not None else handin.summarise(entries, data.get("notebooks")))
    stored = data.get("summary")
    if isinstance(stored, dict) and "journal" not in stored:  # a hand-in exported before the journal's chain
        summary.pop("journal")
    if summary != stored:
        flags.append("summary does not match its journal lines (edited by hand?)")
    if handin.digest(lines, data.get("summary")) != data.get("digest"):
        flags.append("digest does not match the file (edited after export?)")
    return flags


def check_handin(data: dict, rerun_code: bool = True, timeout_s: float = 120.0) -> tuple[list[str], dict]:
    """Every flag of one hand-in, and the summary recomputed from its lines (what the table counts)."""
    entries = journal.parse([json.dumps(x) for x in data.get("entries", []) if isinstance(x, dict)])
    summary = handin.summarise(entries, data.get("notebooks"))
    flags = integrity_flags(data, summary) + summary["journal"]["breaks"]  # lines deleted, moved or edited
    found = regrade.exercise_flags(entries) + regrade.prediction_flags(entries) + regrade.design_flags(entries)
    if rerun_code:
        found += regrade.coding_flags(summary, timeout_s)[0]
    return flags + [str(f) for f in found], summary


def collect(folder: Path, out: Path | None = None, rerun_code: bool = True,
            timeout_s: float = 120.0) -> list[dict[str, object]]:
    """Read every hand-in under ``folder``, write ``class.csv`` and ``class.json`` to ``out`` (default: folder)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise LabkitError(f"DIR must be a folder of hand-ins (no folder {str(folder)!r})")
    out = folder if out is None else Path(out)
    if not out.is_dir():
        raise LabkitError(f"out must be an existing folder (no folder {str(out)!r})")
    previous = os.environ.get(journal.ENV)
    os.environ[journal.ENV] = os.devnull  # re-grading runs checks: nothing of it belongs in a journal
    students: dict[str, Student] = {}
    skipped = []
    try:
        for path in sorted(folder.rglob("*.json")):
            if path.name == "class.json":
                continue
            data = _load(path)
            if data is None:
                skipped.append(path.name)
                continue
            name = str(data.get("student") or path.stem)
            s = students.setdefault(name, Student(name))
            flags, summary = check_handin(data, rerun_code, timeout_s)
            s.files.append(str(path.relative_to(folder)))
            s.versions.add(str(data.get("labkit_version", "")))
            s.summaries.append(summary)
            s.flags += [f"{path.name}: {f}" for f in flags]
    finally:
        if previous is None:
            os.environ.pop(journal.ENV, None)
        else:
            os.environ[journal.ENV] = previous
    if not students:
        raise LabkitError(f"DIR must hold hand-ins (labkit-handin JSON files); none in {str(folder)!r}")
    rows = [s.row() for _, s in sorted(students.items())]
    with open(out / "class.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    detail = {"columns": list(COLUMNS), "rows": rows, "skipped": skipped,
              "students": {n: {"files": s.files, "flags": s.flags, "summaries": s.summaries}
                           for n, s in sorted(students.items())}}  # fmt: skip
    (out / "class.json").write_text(json.dumps(detail, indent=1) + "\n")
    return rows
