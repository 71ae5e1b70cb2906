"""Student copies of the notebooks: every output cleared, made once and never overwritten."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from labkit.errors import LabkitError

ROOT = Path(__file__).resolve().parents[2]
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
