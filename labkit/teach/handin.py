"""The hand-in: a student's journal, scored the way it happened, with a check that it was not edited.

Scoring follows what a teacher would count: a prediction by the guess committed before its
first reveal (a guess changed afterwards is listed, not scored); a self-check, reasoning or
coding exercise by whether it was ever right and in how many tries; a design task by whether
it was ever met, with the panel settings that met it; the capstone by its best plan.

A hand-in carries its journal lines, the summary computed from them and a SHA-256 digest of
both, so :mod:`labkit.course.collect` can recompute the summary and notice a hand-edited one. The
summary also says whether the journal's hash chain holds (``journal.breaks``, from
:func:`labkit.teach.journal.verify`): a line deleted, moved or edited before the export shows there.
The digest is tamper-evidence against editing the file, not a secret: collect also re-grades
every answer it can against labkit's own model.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import asdict
from pathlib import Path

import labkit
from labkit.errors import LabkitError
from labkit.teach import journal
from labkit.teach.predictions import NO_GUESS, PREDICTIONS, state

FORMAT = "labkit-handin/1"


def _tried(items: list[journal.Entry]) -> dict:
    tries = [e for e in items if e.event == "try" and e.answer is not None]
    right = [i for i, e in enumerate(tries) if e.ok]
    out = {"tries": len(tries), "ever_right": bool(right), "first_right_try": right[0] + 1 if right else None,
           "last_answer": tries[-1].answer if tries else None}
    if items and items[0].kind == "coding":
        chosen = tries[right[0]] if right else (tries[-1] if tries else None)
        out["source"] = chosen.detail.get("source", "") if chosen else ""
        out["function"] = chosen.answer if chosen else None
        if chosen and "path" in chosen.detail:  # a build-it module: its source above, where it lived here
            out["path"] = chosen.detail["path"]
    if items and items[0].kind in ("design", "capstone"):
        chosen = tries[right[0]] if right else None
        out["settings"] = chosen.answer if chosen else None
        out["reason"] = (chosen or (tries[-1] if tries else None)).detail.get("reason", "") if tries else ""
    return out


def _predicted(key: str, items: list[journal.Entry]) -> dict:
    st = state(key, items)
    if not st.revealed:
        return {"committed": st.latest, "status": "not revealed", "ok": None, "after_reveal": []}
    first = next((e for e in items if e.event == "reveal" and e.answer == st.committed), None)
    ok = bool(first and first.ok) if st.committed != NO_GUESS else False
    status = NO_GUESS if st.committed == NO_GUESS else ("right" if ok else "wrong")
    return {"committed": st.committed, "status": status, "ok": ok, "after_reveal": list(st.after)}


def summarise(entries: list[journal.Entry], notebooks: list[str] | None = None) -> dict:
    """Per item and in total, scored as the module docstring says; ``notebooks`` sets what is registered."""
    by_key: dict[str, list[journal.Entry]] = {}
    for e in entries:
        by_key.setdefault(e.key, []).append(e)
    items = {}
    for key, group in sorted(by_key.items()):
        kind = group[0].kind
        items[key] = {"kind": kind, **(_predicted(key, group) if kind == "prediction" else _tried(group))}
    books = sorted(set(notebooks or []) | {k[:2] for k in by_key})
    registered = [k for k in PREDICTIONS if k[:2] in books]
    preds = [items[k] for k in registered if k in items]
    totals = {"predictions": {"registered": len(registered), "revealed": sum(p["status"] != "not revealed"
                                                                             for p in preds),
                              "committed": sum(p["status"] in ("right", "wrong") for p in preds),
                              "right": sum(p["status"] == "right" for p in preds),
                              "no_guess": sum(p["status"] == NO_GUESS for p in preds)}}
    for kind in ("exercise", "reasoning", "coding", "design", "capstone"):
        mine = [v for v in items.values() if v["kind"] == kind]
        totals[kind] = {"answered": sum(v["tries"] > 0 for v in mine), "right": sum(v["ever_right"] for v in mine),
                        "tries": sum(v["tries"] for v in mine)}
    return {"notebooks": books, "totals": totals, "items": items,
            "journal": {"lines": len(entries), "breaks": journal.verify(entries)}}


def digest(entries: list[dict], summary: dict) -> str:
    """SHA-256 of the hand-in's lines and summary, canonical JSON: any edit to either changes it."""
    text = json.dumps({"entries": entries, "summary": summary}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def handin(entries: list[journal.Entry], student: str = "", notebooks: list[str] | None = None) -> dict:
    """The hand-in as a JSON-ready dict: who, which notebooks, which labkit, the lines, the summary, the digest."""
    lines = [asdict(e) for e in entries]
    summary = summarise(entries, notebooks)
    return {"format": FORMAT, "student": student, "notebooks": summary["notebooks"],
            "labkit_version": labkit.__version__, "exported_at": round(time.time(), 3), "entries": lines,
            "summary": summary, "digest": digest(lines, summary)}


def export_answers(path: str | Path, student: str = "", notebook: str | None = None) -> Path:
    """Write the hand-in of this folder's journal (one notebook's, with ``notebook="01"``) as JSON."""
    path = Path(path)
    if path.suffix != ".json":
        raise LabkitError(f"path must end in .json (got {str(path)!r})")
    if not path.parent.is_dir():
        raise LabkitError(f"path must be in an existing folder (no folder {str(path.parent)!r})")
    if notebook is not None and not (len(notebook) == 2 and notebook.isdigit()):
        raise LabkitError(f"notebook must be two digits, like '01' (got {notebook!r})")
    entries = [e for e in journal.entries() if notebook is None or e.notebook == notebook]
    payload = handin(entries, student, [notebook] if notebook else None)
    try:
        path.write_text(json.dumps(payload, indent=1) + "\n")
    except OSError as err:
        raise LabkitError(f"path must be writable ({err.strerror}: {str(path)!r})") from None
    return path
