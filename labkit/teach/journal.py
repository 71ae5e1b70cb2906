"""The learner's journal: every answer, appended to a file beside the notebook as it is given.

The bottom of the teaching layer: checks, reveals, coding exercises, design tasks and the
capstone append one JSON line each (:func:`record`); :mod:`labkit.teach.handin` reads the
file back to score and export it. A file, not a list in the kernel, so a kernel restart
loses nothing, and the hand-in is built from what happened, in order, not from the last try.

The file is ``labkit-journal.jsonl`` in the kernel's working folder (Jupyter starts a
kernel in its notebook's folder), or the path in ``$LABKIT_JOURNAL``. JSON lines hold only
JSON values: numbers stay numbers (``np.float64(18.97)`` is stored as 18.97, never its repr).
"""

from __future__ import annotations

import json
import math
import os
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path

ENV = "LABKIT_JOURNAL"
FILENAME = "labkit-journal.jsonl"
KINDS = ("prediction", "exercise", "reasoning", "coding", "design", "capstone")
SESSION = uuid.uuid4().hex[:12]  # one per kernel: a restart shows as a new session in the journal


@dataclass(frozen=True)
class Entry:
    """One thing a student did: a try at an exercise, a committed guess, a reveal, a design check.

    ``event`` says which: "try" (an exercise, coding or design check), "commit" (a guess set),
    "reveal" (a reveal that showed the answer), "refused" (a reveal run with no guess: recorded
    as "no guess"), "pass" (the student chose not to guess), "malformed" (a guess that was not
    one). ``detail`` keeps what a re-grade needs: the revealed value and its tolerance, a coding
    answer's source, a design task's settings.
    """

    kind: str
    key: str
    event: str
    answer: object
    ok: bool | None
    diagnosis: str = ""
    detail: dict = field(default_factory=dict)
    at: float = 0.0
    session: str = ""

    @property
    def notebook(self) -> str:
        return self.key[:2]


def path() -> Path:
    """Where this kernel's journal lives: ``$LABKIT_JOURNAL``, or beside the notebook."""
    return Path(os.environ.get(ENV) or Path.cwd() / FILENAME)


def jsonable(value: object) -> object:
    """``value`` as plain JSON: numpy and torch scalars as numbers, tuples as lists, anything else as text."""
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [jsonable(v) for v in (sorted(value, key=repr) if isinstance(value, set | frozenset) else value)]
    item = getattr(value, "item", None)  # numpy and torch scalars
    if callable(item):
        try:
            return jsonable(item())
        except (TypeError, ValueError):
            pass
    return str(value)


def record(kind: str, key: str, answer: object, ok: bool | None, diagnosis: str = "", *, event: str = "try",
           **detail: object) -> Entry:
    """Append one entry to the journal file now (one line, flushed), and return it."""
    entry = Entry(kind, key, event, jsonable(answer), None if ok is None else bool(ok), diagnosis,
                  jsonable(detail), round(time.time(), 3), SESSION)
    target = path()
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target, "a", encoding="utf-8") as f:
        f.write(json.dumps(asdict(entry), sort_keys=True) + "\n")
    return entry


def parse(lines: list[str]) -> list[Entry]:
    """Entries from JSON lines; a line that is not an entry (a torn last line, an edit) is skipped."""
    out = []
    names = set(Entry.__dataclass_fields__)
    for line in lines:
        try:
            raw = json.loads(line)
        except ValueError:
            continue
        if isinstance(raw, dict) and {"kind", "key", "event"} <= raw.keys() and raw.keys() <= names:
            if isinstance(raw["key"], str) and isinstance(raw.get("detail", {}), dict):
                out.append(Entry(**raw))
    return out


def entries(where: Path | None = None) -> list[Entry]:
    """Every entry of the journal at ``where`` (default :func:`path`), in the order given."""
    target = path() if where is None else Path(where)
    if not target.is_file():
        return []
    return parse(target.read_text(encoding="utf-8").splitlines())


def of(key: str, where: Path | None = None) -> list[Entry]:
    """The entries of one exercise or prediction, in order."""
    return [e for e in entries(where) if e.key == key]
