"""Collect a class's hand-ins into a gradebook: every count re-graded by labkit, none taken from a hand-in's claims.

``collect(folder, out)`` reads each ``*.json`` under the folder as JSON (never anything else: no pickle,
no import), checks that its summary is the one its journal lines give and that its digest holds
(:mod:`labkit.teach.handin`), that its journal's hash chain is whole (:func:`labkit.teach.journal.verify`),
re-grades every item (:mod:`labkit.course.gradebook`, :mod:`labkit.course.regrade`: the submitted code re-run
in the sandbox) and writes, into ``out`` (made if it does not exist):

* ``class.csv``: one row per student, the columns of :data:`COLUMNS`, counted from the re-graded items;
* ``items.csv``: one row per student and item (:data:`labkit.course.gradebook.ITEM_COLUMNS`), for a
  spreadsheet's or an LMS's pivot;
* ``flags.csv``: one row per flag (student, file, item, code, message; the codes in
  :data:`labkit.course.regrade.CODES`);
* ``similarity.csv``: every pair of students' solutions of each coding and build-it item, with the
  overlap of their normalised code (:mod:`labkit.course.similarity`): a figure to look at, not a verdict;
* ``class.json``: all of it, with the pairs above :data:`labkit.course.similarity.PAIR_REPORT`.

A hand-in that cannot be read, or an item that cannot be graded, is a flag on that student; the rest of
the class is collected whatever it holds.
"""

from __future__ import annotations

import csv
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from labkit.course import gradebook, regrade, regrade_code, similarity
from labkit.errors import LabkitError
from labkit.teach import handin, journal

COLUMNS = ("student", "files", "notebooks", "labkit_versions", *gradebook.TOTALS, "flag_codes", "flags")
FLAG_COLUMNS = ("student", "file", "item", "code", "message")
PAIR_COLUMNS = ("item", "student_a", "student_b", "similarity", "long_enough")


@dataclass
class Student:
    """One student's hand-ins, merged: re-graded items (the first file's where two hold one), flags of every file."""

    name: str
    files: list[str] = field(default_factory=list)
    versions: set[str] = field(default_factory=set)
    items: dict[str, gradebook.ItemRow] = field(default_factory=dict)
    flags: list[dict[str, str]] = field(default_factory=list)
    sources: dict[str, str] = field(default_factory=dict)  # coding item -> the source re-run

    def flag(self, file: str, item: str, code: str, message: str) -> None:
        self.flags.append({"student": self.name, "file": file, "item": item, "code": code, "message": message})

    def row(self) -> dict[str, object]:
        books = sorted({r.notebook for r in self.items.values()})
        codes = sorted({f["code"] for f in self.flags})
        return {"student": self.name, "files": ";".join(self.files), "notebooks": ";".join(books),
                "labkit_versions": ";".join(sorted(self.versions)), **gradebook.totals(list(self.items.values())),
                "flag_codes": ";".join(codes),
                "flags": " | ".join(f"{f['file']}: {f['message']}" for f in self.flags)}


def _load(path: Path) -> dict | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError, RecursionError):
        return None
    return data if isinstance(data, dict) and data.get("format") == handin.FORMAT else None


def integrity_flags(data: dict, summary: dict | None = None) -> list[regrade.Flag]:
    """Whether the stored summary is what the stored lines give, and the digest still holds (``summary``: those
    lines' summary when the caller has computed it already)."""
    lines = data.get("entries") if isinstance(data.get("entries"), list) else []
    entries = journal.parse([json.dumps(x) for x in lines])
    flags = [regrade.Flag("", f"{name} must be a list (got {type(data.get(name)).__name__})", "MALFORMED")
             for name in ("entries", "notebooks") if not isinstance(data.get(name), list)]
    if len(entries) != len(lines):
        flags.append(regrade.Flag("", f"{len(lines) - len(entries)} journal lines are not journal entries",
                                  "NOT_ENTRIES"))
    summary = dict(summary if summary is not None else handin.summarise(entries, data.get("notebooks")))
    stored = data.get("summary")
    if isinstance(stored, dict) and "journal" not in stored:  # a hand-in exported before the journal's chain
        summary.pop("journal")
    if summary != stored:
        flags.append(regrade.Flag("", "summary does not match its journal lines (edited by hand?)", "SUMMARY_EDITED"))
    if handin.digest(lines, data.get("summary")) != data.get("digest"):
        flags.append(regrade.Flag("", "digest does not match the file (edited after export?)", "DIGEST"))
    return flags


def _notebooks(data: dict) -> list[str]:
    books = data.get("notebooks")
    return [b for b in books if isinstance(b, str) and len(b) == 2 and b.isdigit()] if isinstance(books, list) else []


def check_handin(data: dict, rerun_code: bool = True, timeout_s: float = 120.0, unsafe: bool = False,
                 student: str = "") -> tuple[list[regrade.Flag], list[gradebook.ItemRow], dict[str, str]]:
    """Every flag of one hand-in, its re-graded item rows, and the coding sources that were re-run."""
    lines = data.get("entries") if isinstance(data.get("entries"), list) else []
    entries = journal.parse([json.dumps(x) for x in lines if isinstance(x, dict)])
    books = _notebooks(data)
    summary = handin.summarise(entries, books)
    flags = integrity_flags(data, summary)
    flags += [regrade.Flag("", b, "CHAIN_BREAK") for b in summary["journal"]["breaks"]]
    flags += regrade.exercise_flags(entries) + regrade.prediction_flags(entries) + regrade.design_flags(entries)
    items, bad = regrade_code.coding_items(summary)
    reruns = None
    if rerun_code:
        found, reruns = regrade_code.regrade_code(summary, timeout_s, unsafe)
        flags += found
    else:
        flags += bad + regrade_code.copy_flags({i["key"]: i["source"] for i in items})
        flags += [regrade.Flag(i["key"], "not re-run (--no-rerun): not counted as passed", "NOT_RERUN")
                  for i in items]
    rows = gradebook.item_rows(student, entries, books, reruns, flags)
    return flags, rows, {i["key"]: i["source"] for i in items}


def _write_csv(path: Path, columns: tuple[str, ...], rows: list[dict]) -> None:
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)


def _out_folder(out: Path) -> Path:
    if out.exists() and not out.is_dir():
        raise LabkitError(f"out must be a folder (got the file {str(out)!r})")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise LabkitError(f"out must be a folder that can be made ({str(out)!r}: {err.strerror})") from None
    return out


def _read_student(students: dict[str, Student], path: Path, folder: Path, data: dict, rerun_code: bool,
                  timeout_s: float, unsafe: bool) -> None:
    name = str(data.get("student") or path.stem)
    s = students.setdefault(name, Student(name))
    rel = str(path.relative_to(folder))
    s.files.append(rel)
    s.versions.add(str(data.get("labkit_version", "")))
    try:
        flags, rows, sources = check_handin(data, rerun_code, timeout_s, unsafe, name)
    except Exception as err:  # noqa: BLE001 - one unreadable hand-in never stops the class
        s.flag(rel, "", "MALFORMED", f"the hand-in could not be graded ({type(err).__name__}: {err})")
        return
    for f in flags:
        s.flag(rel, f.key, f.code, str(f))
    for r in rows:
        if r.item in s.items and r.tries:
            s.flag(rel, r.item, "DUPLICATE", f"{r.item}: also in an earlier file; that file's counts stand")
        elif r.item not in s.items or (r.tries and not s.items[r.item].tries):
            s.items[r.item] = r
    for k, src in sources.items():
        s.sources.setdefault(k, src)


def collect(folder: Path, out: Path | None = None, rerun_code: bool = True, timeout_s: float = 120.0,
            unsafe: bool = False) -> list[dict[str, object]]:
    """Read every hand-in under ``folder``, write the gradebook files to ``out`` (default: folder; made if new)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise LabkitError(f"DIR must be a folder of hand-ins (no folder {str(folder)!r})")
    out = _out_folder(folder if out is None else Path(out))
    written = {out / n for n in ("class.json", "class.csv", "items.csv", "flags.csv", "similarity.csv")}
    previous = os.environ.get(journal.ENV)
    os.environ[journal.ENV] = os.devnull  # re-grading runs checks: nothing of it belongs in a journal
    students: dict[str, Student] = {}
    skipped = []
    try:
        for path in sorted(folder.rglob("*.json")):
            if path in written or path.name == "class.json":
                continue
            data = _load(path)
            if data is None:
                skipped.append(path.name)
                continue
            _read_student(students, path, folder, data, rerun_code, timeout_s, unsafe)
    finally:
        if previous is None:
            os.environ.pop(journal.ENV, None)
        else:
            os.environ[journal.ENV] = previous
    if not students:
        raise LabkitError(f"DIR must hold hand-ins (labkit-handin JSON files); none in {str(folder)!r}")
    ordered = [s for _, s in sorted(students.items())]
    rows = [s.row() for s in ordered]
    items = [r.csv() for s in ordered for _, r in sorted(s.items.items())]
    flags = [f for s in ordered for f in s.flags]
    pairs = _pairs(ordered)
    _write_csv(out / "class.csv", COLUMNS, rows)
    _write_csv(out / "items.csv", gradebook.ITEM_COLUMNS, items)
    _write_csv(out / "flags.csv", FLAG_COLUMNS, flags)
    _write_csv(out / "similarity.csv", PAIR_COLUMNS, pairs)
    detail = {"columns": list(COLUMNS), "rows": rows, "skipped": skipped, "items": items, "flags": flags,
              "codes": regrade.CODES, "similar_pairs": [p for p in pairs if p["similarity"] >= similarity.PAIR_REPORT],
              "similarity_threshold": {"min_nodes": similarity.MIN_NODES, "pairs_listed_from": similarity.PAIR_REPORT},
              "students": {s.name: {"files": s.files, "flags": s.flags} for s in ordered}}  # fmt: skip
    (out / "class.json").write_text(json.dumps(detail, indent=1) + "\n")
    return rows


def _pairs(students: list[Student]) -> list[dict[str, object]]:
    """Every pair of students' solutions per coding item, most alike first (build-it stubs taken out)."""
    from labkit.practice.build import BUILDS
    from labkit.practice.build.harness import STUBS

    by_item: dict[str, dict[str, str]] = {}
    for s in students:
        for k, src in s.sources.items():
            by_item.setdefault(k, {})[s.name] = src
    bases = {k: (STUBS / BUILDS[k].stub).read_text() for k in by_item if k in BUILDS}
    return [{"item": p.item, "student_a": p.a, "student_b": p.b, "similarity": p.similarity,
             "long_enough": p.long_enough} for p in similarity.pairs(by_item, bases)]  # fmt: skip

