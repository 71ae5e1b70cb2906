"""The learner's journal: every answer, appended to a file beside the notebook as it is given.

The bottom of the teaching layer: checks, reveals, coding exercises, design tasks and the
capstone append one JSON line each (:func:`record`); :mod:`labkit.teach.handin` reads the
file back to score and export it. A file, not a list in the kernel, so a kernel restart
loses nothing, and the hand-in is built from what happened, in order, not from the last try.

The file is ``labkit-journal.jsonl`` in the kernel's working folder (Jupyter starts a
kernel in its notebook's folder), or the path in ``$LABKIT_JOURNAL``. JSON lines hold only
JSON values: numbers stay numbers (``np.float64(18.97)`` is stored as 18.97, never its repr).

Tamper-evident: each notebook's lines form a hash chain. A line carries ``prev`` (the ``chain`` of
the notebook's line before it, "" for its first) and ``chain`` = SHA-256 over its own canonical JSON,
``prev`` included, so :func:`verify` finds a line deleted, moved or edited by hand (the same
construction as a Merkle-Damgard chain or a git history). The chain's head is read back from the
file, so a kernel restart continues it; a kernel also remembers the last line it wrote, and if that
line has vanished from the file when it writes the next one, it chains to the vanished line, so
deleting one's own last tries and carrying on leaves a visible break. Per notebook, so a hand-in
of one notebook (``export_answers(..., notebook="01")``) holds a whole chain. Journals written
before the chain (no ``chain`` field) load as before and are reported as unchained: their
deletions cannot be detected. Evidence, not proof: nothing secret lives on the student's
machine, so a student who recomputes every digest with a script is not caught by this.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import time
import uuid
from dataclasses import asdict, dataclass, field, replace
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
    prev: str = ""  # the chain of this notebook's line before this one ("" for its first line)
    chain: str = ""  # SHA-256 over this line's canonical JSON (prev included, chain left out); "" in old journals

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


_HEADS: dict[tuple[str, str], str] = {}  # (journal file, notebook) -> the chain of this kernel's last line there


def digest_of(entry: Entry) -> str:
    """SHA-256 over the entry's canonical JSON without its ``chain`` (``prev`` is in it: the link)."""
    fields = {k: v for k, v in asdict(entry).items() if k != "chain"}
    return hashlib.sha256(json.dumps(fields, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _previous(target: Path, notebook: str) -> str:
    """The chain this notebook's next line links to: the file's last line of it, or the vanished line we wrote."""
    chains = [e.chain for e in entries(target) if e.notebook == notebook]
    mine = _HEADS.get((str(target), notebook))
    if mine is not None and mine not in chains:
        return mine  # our last line was deleted from the file: link to it, so the break shows
    return chains[-1] if chains else ""


def record(kind: str, key: str, answer: object, ok: bool | None, diagnosis: str = "", *, event: str = "try",
           **detail: object) -> Entry:
    """Append one entry to the journal file now (one line, flushed, chained to its notebook's last), and return it."""
    target = path()
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target, "ab+") as f:
        _lock(f)
        entry = Entry(kind, key, event, jsonable(answer), None if ok is None else bool(ok), diagnosis,
                      jsonable(detail), round(time.time(), 3), SESSION, _previous(target, key[:2]))
        entry = replace(entry, chain=digest_of(entry))
        end = f.seek(0, os.SEEK_END)
        torn = end > 0 and f.seek(end - 1) >= 0 and f.read(1) != b"\n"  # a line cut off by a killed kernel
        line = json.dumps(asdict(entry), sort_keys=True) + "\n"
        f.write((("\n" if torn else "") + line).encode("utf-8"))  # end it, never glue onto it
        f.flush()
    _HEADS[(str(target), entry.notebook)] = entry.chain
    return entry


def _lock(f) -> None:
    """An exclusive lock on the open journal until it is closed: two kernels never interleave a read and a write."""
    try:
        import fcntl
    except ImportError:  # Windows: no lock; the chain would show an interleaving as a break
        return
    fcntl.flock(f.fileno(), fcntl.LOCK_EX)


def verify(items: list[Entry]) -> list[str]:
    """What the chains of these entries show: "" problems for an intact journal, else one line per break.

    Per notebook, in order: a line whose ``prev`` is not the chain of the notebook's line before it
    (a line deleted or moved before it), a line whose content does not give its ``chain`` (edited),
    or lines with no chain (a journal from before the chain, or chains stripped).
    """
    problems: list[str] = []
    head: dict[str, str] = {}
    unchained: dict[str, int] = {}
    for n, e in enumerate(items, 1):
        book = e.notebook
        if not e.chain:
            unchained[book] = unchained.get(book, 0) + 1
            continue
        if digest_of(e) != e.chain:
            problems.append(f"notebook {book}: journal line {n} ({e.key}, {e.event}) was edited")
        if e.prev != head.get(book, ""):
            problems.append(f"notebook {book}: a journal line is missing or moved before line {n} ({e.key}, {e.event})")
        head[book] = e.chain
    for book, count in sorted(unchained.items()):
        problems.append(f"notebook {book}: {count} journal lines carry no chain (written before labkit chained its "
                        "journal, or the chain was stripped): deleted lines cannot be detected")
    return problems


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
