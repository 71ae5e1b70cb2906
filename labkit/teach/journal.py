"""The learner's journal: every answer given in this kernel, in order, with its verdict.

The bottom of the teaching layer: checks, reveals, coding exercises and design tasks
append to it; :func:`export_answers` writes it out for the instructor.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from labkit.errors import LabkitError


@dataclass(frozen=True)
class Answer:
    """One answer a student gave in this kernel: to an exercise or to a committed prediction."""

    kind: str  # "exercise" or "prediction"
    key: str
    answer: str
    ok: bool
    diagnosis: str
    at: float  # seconds since the epoch


ANSWERS: list[Answer] = []


def record(kind: str, key: str, answer: object, ok: bool, diagnosis: str = "") -> None:
    """Keep one answer for :func:`export_answers` (called by the checks and reveals)."""
    if answer is not None:
        ANSWERS.append(Answer(kind, key, repr(answer), bool(ok), diagnosis, time.time()))


def export_answers(path: str | Path, student: str = "") -> Path:
    """Write this kernel's answers (every try, in order, with the verdict) as JSON for the instructor."""
    path = Path(path)
    if path.suffix != ".json":
        raise LabkitError(f"path must end in .json (got {str(path)!r})")
    last = {}
    for a in ANSWERS:
        last[(a.kind, a.key)] = a
    summary = {"answered": len(last), "right": sum(a.ok for a in last.values())}
    payload = {"student": student, "summary": summary, "answers": [asdict(a) for a in ANSWERS]}
    path.write_text(json.dumps(payload, indent=1) + "\n")
    return path
