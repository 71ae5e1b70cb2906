"""Student copies of the notebooks: outputs and widget state cleared, versioned, made once and never overwritten.

A copy carries ``metadata["labkit"] = {"notebook": "01", "version": "0.1.0+3f2a..."}``: labkit's
version and a hash of the cells' sources, so a hand-in and an instructor can tell which text a
student worked on. When the lab ships a new version of a notebook the student already has,
``update`` writes it beside theirs (``01_storage_challenges.v0.1.0+3f2a....ipynb``) and leaves
their work as it is.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import labkit
from labkit.errors import LabkitError

ROOT = Path(__file__).resolve().parents[2]
LABS = ROOT / "labs"
STUDENT_DIR = ROOT / "my-labs"


@dataclass(frozen=True)
class Copies:
    """Which copies were made now, kept as they were, or had a new version written beside them."""

    created: tuple[str, ...]
    kept: tuple[str, ...]
    updated: tuple[str, ...] = ()


def version_of(notebook: dict) -> str:
    """labkit's version and the first 10 hex digits of SHA-256 over the cells' types and sources."""
    text = json.dumps([[c.get("cell_type"), "".join(c.get("source", ""))] for c in notebook.get("cells", [])])
    return f"{labkit.__version__}+{hashlib.sha256(text.encode()).hexdigest()[:10]}"


def cleared(notebook: dict, name: str = "") -> dict:
    """A student copy: no output, execution count or widget state; the cells' ids and tags kept; versioned."""
    out = json.loads(json.dumps(notebook))
    out.get("metadata", {}).pop("widgets", None)
    for cell in out.get("cells", []):
        cell.get("metadata", {}).pop("widgets", None)
        if cell.get("cell_type") == "code":
            cell["outputs"], cell["execution_count"] = [], None
            cell.get("metadata", {}).pop("execution", None)
    out.setdefault("metadata", {})["labkit"] = {"notebook": name[:2], "version": version_of(notebook)}
    return out


def _write(target: Path, notebook: dict) -> None:
    tmp = target.with_suffix(".ipynb.tmp")
    try:
        tmp.write_text(json.dumps(notebook, indent=1) + "\n")
        tmp.replace(target)  # atomic: a half-written copy never shadows the real one
    except OSError as err:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        raise LabkitError(f"dst must be a writable folder ({str(target.parent)!r}: {err.strerror})") from None


def _read(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise LabkitError(f"notebook must be a readable .ipynb (JSON) file ({path}: {err})") from None
    if not isinstance(data, dict):
        raise LabkitError(f"notebook must be a JSON object ({path})")
    return data


def make_student_copies(src: Path = LABS, dst: Path = STUDENT_DIR, update: bool = False) -> Copies:
    """Copy each ``src/*.ipynb`` to ``dst`` cleared, unless the student has it; ``update`` puts a newer one beside."""
    sources = sorted(Path(src).glob("*.ipynb"))
    if not sources:
        raise LabkitError(f"src must be a folder holding the lab's notebooks (no *.ipynb in {str(src)!r})")
    dst = Path(dst)
    if dst.exists() and not dst.is_dir():
        raise LabkitError(f"dst must be a folder (got the file {str(dst)!r})")
    try:
        dst.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise LabkitError(f"dst must be a folder that can be made ({str(dst)!r}: {err.strerror})") from None
    created, kept, updated = [], [], []
    for nb in sources:
        fresh = cleared(_read(nb), nb.name)
        target = dst / nb.name
        if not target.exists():
            _write(target, fresh)
            created.append(nb.name)
            continue
        kept.append(nb.name)
        version = fresh["metadata"]["labkit"]["version"]
        mine = _version(target)
        if update and mine != version:
            beside = dst / f"{nb.stem}.v{version}.ipynb"
            if not beside.exists():
                _write(beside, fresh)
                updated.append(beside.name)
    return Copies(tuple(created), tuple(kept), tuple(updated))


def _version(path: Path) -> object:
    """The labkit version a student's copy carries, or None when it cannot be read (a broken or hand-edited
    notebook): an update then writes the new version beside it rather than stopping the lab from opening."""
    try:
        meta = _read(path).get("metadata")
    except LabkitError:
        return None
    labkit = meta.get("labkit") if isinstance(meta, dict) else None
    return labkit.get("version") if isinstance(labkit, dict) else None
