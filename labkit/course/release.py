"""A student release: the lab as students get it, with no solved output, no widget state, no instructor key.

The checkout an instructor works in holds ``labs/`` with every solved output (what CI checks)
and ``instructor/key.py`` (the reference solutions). A release copies only what a student
needs to run the lab: the ``labkit`` package, its ``datasets/``, the packaging and docs files,
and ``labs/`` as student copies (:func:`labkit.course.copies.cleared`). Tests stay behind too:
they import the key.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import labkit
from labkit.course.copies import LABS, ROOT, cleared
from labkit.errors import LabkitError

FILES = ("pyproject.toml", "README.md", "Makefile", "environment.yml")
TREES = ("labkit", "datasets", "docs")
SKIP = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", ".ipynb_checkpoints", "labkit-journal.jsonl")


@dataclass(frozen=True)
class Release:
    """Where the release is and what it holds (paths relative to it)."""

    root: Path
    notebooks: tuple[str, ...]
    files: tuple[str, ...]


def make_release(dst: Path, root: Path = ROOT, labs: Path = LABS) -> Release:
    """Write a student distribution into ``dst`` (a new or empty folder)."""
    dst = Path(dst)
    if dst.exists() and (not dst.is_dir() or any(dst.iterdir())):
        raise LabkitError(f"dst must be a new or empty folder (got {str(dst)!r})")
    notebooks = sorted(Path(labs).glob("*.ipynb"))
    if not notebooks:
        raise LabkitError(f"labs must be a folder holding the lab's notebooks (no *.ipynb in {str(labs)!r})")
    dst.mkdir(parents=True, exist_ok=True)
    for name in TREES:
        if (root / name).is_dir():
            shutil.copytree(root / name, dst / name, ignore=SKIP)
    for name in FILES:
        if (root / name).is_file():
            shutil.copy2(root / name, dst / name)
    (dst / "labs").mkdir()
    for nb in notebooks:
        copy = cleared(json.loads(nb.read_text()), nb.name)
        (dst / "labs" / nb.name).write_text(json.dumps(copy, indent=1) + "\n")
    files = tuple(sorted(str(p.relative_to(dst)) for p in dst.rglob("*") if p.is_file()))
    manifest = {"labkit_version": labkit.__version__, "notebooks": {nb.name: cleared(json.loads(nb.read_text()),
                nb.name)["metadata"]["labkit"]["version"] for nb in notebooks}}  # fmt: skip
    (dst / "RELEASE.json").write_text(json.dumps(manifest, indent=1) + "\n")
    return Release(dst, tuple(nb.name for nb in notebooks), files)
