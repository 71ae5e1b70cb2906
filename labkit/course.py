"""Running a course on the lab: clean student copies of the notebooks, and answers an instructor collects.

``labs/`` holds the solved notebooks with their stored outputs (what CI validates and
an instructor opens). A student works in their own copy with the outputs cleared, so
no prediction is answered on screen before the student runs the cell; copies are made
once and never overwritten, so a student's work survives ``make lab`` being run again.

    python -m labkit.course copies [--src labs] [--dst my-labs]   # what `make lab` runs first
    python -m labkit.course export answers.json --student NAME   # the answers of this kernel
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from labkit.errors import LabkitError

ROOT = Path(__file__).resolve().parent.parent
LABS = ROOT / "labs"
STUDENT_DIR = ROOT / "my-labs"


@dataclass(frozen=True)
class Copies:
    """Which student copies were made now and which already existed (and were left alone)."""

    created: tuple[str, ...]
    kept: tuple[str, ...]


def cleared(notebook: dict) -> dict:
    """A notebook with every output and execution count removed (the cells' tags are kept)."""
    out = json.loads(json.dumps(notebook))
    for cell in out.get("cells", []):
        if cell.get("cell_type") == "code":
            cell["outputs"], cell["execution_count"] = [], None
            cell.get("metadata", {}).pop("execution", None)
    return out


def make_student_copies(src: Path = LABS, dst: Path = STUDENT_DIR) -> Copies:
    """Copy each ``src/*.ipynb`` to ``dst`` with outputs cleared, unless the student already has it."""
    sources = sorted(Path(src).glob("*.ipynb"))
    if not sources:
        raise LabkitError(f"src must be a folder holding the lab's notebooks (no *.ipynb in {str(src)!r})")
    dst = Path(dst)
    dst.mkdir(parents=True, exist_ok=True)
    created, kept = [], []
    for nb in sources:
        target = dst / nb.name
        if target.exists():
            kept.append(nb.name)
            continue
        tmp = target.with_suffix(".ipynb.tmp")
        tmp.write_text(json.dumps(cleared(json.loads(nb.read_text())), indent=1) + "\n")
        tmp.replace(target)  # atomic: a half-written copy never shadows the real one
        created.append(nb.name)
    return Copies(tuple(created), tuple(kept))


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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m labkit.course")
    sub = parser.add_subparsers(dest="command", required=True)
    cp = sub.add_parser("copies", help="make the student copies (outputs cleared), never overwriting one")
    cp.add_argument("--src", default=str(LABS))
    cp.add_argument("--dst", default=str(STUDENT_DIR))
    a = parser.parse_args(argv)
    try:
        made = make_student_copies(Path(a.src), Path(a.dst))
    except LabkitError as err:
        print(f"labkit: error: {err}", file=sys.stderr)
        return 2
    print(f"student copies in {a.dst}: {len(made.created)} new, {len(made.kept)} kept as they were")
    return 0


if __name__ == "__main__":
    sys.exit(main())


TOPIC_EXERCISES = ("intra_layer", "offload", "reduction", "resilience", "economics", "future", "advisor")


def exercise_table() -> str:
    """Exercises per notebook, from the registries (importing each topic and the practice package registers them)."""
    import importlib

    from labkit import checks, practice

    for topic in TOPIC_EXERCISES:
        importlib.import_module(f"labkit.{topic}.exercises")
    practice._load()
    rows: dict[str, list[int]] = {}
    for key in checks.EXERCISES:
        rows.setdefault(key[:2], [0, 0, 0])[1 if ".reason." in key else 0] += 1
    for key in practice.CODING:
        rows.setdefault(key[:2], [0, 0, 0])[2] += 1
    lines = ["notebook  self-checks  reasoning  coding", "--------  -----------  ---------  ------"]
    lines += [f"{nb:>8}  {a:>11}  {b:>9}  {c:>6}" for nb, (a, b, c) in sorted(rows.items())]
    return "\n".join(lines)
