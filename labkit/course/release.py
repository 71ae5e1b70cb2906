"""A student release: the lab as students get it, with nothing in it that prints, computes or holds an answer
that a student's own checks do not need.

The checkout an instructor works in holds ``labs/`` with every solved output (what CI checks),
``instructor/`` (the coding key, the build-it reference modules, their hidden cases, the values each
reveal showed) and the instructor's course tools. A release copies what a student needs to run the
lab: the ``labkit`` package without :data:`INSTRUCTOR_ONLY` (the key printer, collect and its re-graders,
the sandbox, this module), its ``datasets/``, ``pyproject.toml`` and ``environment.yml``, ``labs/`` as
student copies (:func:`labkit.course.copies.cleared`), and a README and Makefile of its own (the
checkout's point at ``instructor/``, ``make instructor`` and ``make test``, none of which it has).
The notebooks' own checks stay: they judge an answer with labkit's model, in the student's kernel.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import labkit
from labkit.course.copies import LABS, ROOT, cleared
from labkit.errors import LabkitError

FILES = ("pyproject.toml", "environment.yml")
TREES = ("labkit", "datasets")
INSTRUCTOR_ONLY = ("course/key.py", "course/design_key.py", "course/collect.py", "course/regrade.py",
                   "course/regrade_code.py", "course/gradebook.py", "course/similarity.py", "course/release.py",
                   "course/sandbox", "course/sandbox.py")
SKIP = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", ".ipynb_checkpoints", "labkit-journal.jsonl")

README = """# labkit: memory and storage in large-model training (student release)

A Jupyter lab. Each notebook trains a tiny GPT for real on your CPU, measures what the training
holds in memory, moves over links and writes to disk, and puts the measurement beside the model
the literature uses. Start with `labs/00_course_guide.ipynb`.

```bash
make lab     # set up .venv if needed, make your own copies in my-labs/ and open them at http://127.0.0.1:8888
```

Without make: `python -m venv .venv && .venv/bin/pip install -e .`, then
`.venv/bin/python -m labkit.course update --dst my-labs` and `.venv/bin/jupyter lab --notebook-dir=my-labs`.

- **Predict first.** Each prediction is a variable set before its reveal. A reveal run with no
  guess (what Run All does) shows no answer and records "no guess"; a guess set afterwards is
  recorded as "after reveal". `checks.predict(id, checks.PASS)` passes explicitly.
- **Self-checks, coding and build-it exercises** are checked by labkit against its own model and
  real runs; a wrong answer gets a named mistake and one more hint step per try.
- **Your journal.** Every try is appended to `labkit-journal.jsonl` beside the notebook.
  `checks.export_answers("answers-01.json", student="your name", notebook="01")` writes the file
  you hand in; your instructor re-grades it (answers, predictions and your code, run again).

`make lab` never overwrites your copies: a changed notebook is written beside yours.
"""

MAKEFILE = """# `make lab` sets up .venv and opens your own copies of the notebooks (my-labs/, never overwritten).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
HOST   ?= 127.0.0.1
PORT   ?= 8888
export JUPYTER_CONFIG_DIR := $(CURDIR)/$(VENV)/jupyter/config
export JUPYTER_DATA_DIR   := $(CURDIR)/$(VENV)/jupyter/data
export JUPYTER_RUNTIME_DIR:= $(CURDIR)/$(VENV)/jupyter/runtime
export IPYTHONDIR         := $(CURDIR)/$(VENV)/ipython
export MPLCONFIGDIR       := $(CURDIR)/$(VENV)/matplotlib
export OMP_WAIT_POLICY := PASSIVE

.PHONY: lab clean

$(STAMP): pyproject.toml
\ttest -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
\t$(BIN)/python -m pip install --quiet --disable-pip-version-check -e .
\ttouch $(STAMP)

lab: $(STAMP)
\t@$(BIN)/python -m labkit.course update --dst my-labs
\t@token=$${LABKIT_TOKEN:-$$($(BIN)/python -c 'import secrets; print(secrets.token_hex(16))')}; \\
\techo "labkit: open http://$(HOST):$(PORT)/lab?token=$$token"; \\
\t$(BIN)/jupyter lab --notebook-dir=my-labs --ServerApp.ip=$(HOST) --ServerApp.port=$(PORT) \\
\t  --no-browser --allow-root --IdentityProvider.token=$$token

clean:
\trm -rf $(VENV)
"""


@dataclass(frozen=True)
class Release:
    """Where the release is and what it holds (paths relative to it)."""

    root: Path
    notebooks: tuple[str, ...]
    files: tuple[str, ...]


def _without_instructor(package: Path) -> None:
    for rel in INSTRUCTOR_ONLY:
        target = package / rel
        if target.is_dir():
            shutil.rmtree(target)
        elif target.exists():
            target.unlink()


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
    _without_instructor(dst / "labkit")
    for name in FILES:
        if (root / name).is_file():
            shutil.copy2(root / name, dst / name)
    (dst / "README.md").write_text(README)
    (dst / "Makefile").write_text(MAKEFILE)
    (dst / "labs").mkdir()
    versions = {}
    for nb in notebooks:
        copy = cleared(json.loads(nb.read_text()), nb.name)
        versions[nb.name] = copy["metadata"]["labkit"]["version"]
        (dst / "labs" / nb.name).write_text(json.dumps(copy, indent=1) + "\n")
    manifest = {"labkit_version": labkit.__version__, "notebooks": versions}
    (dst / "RELEASE.json").write_text(json.dumps(manifest, indent=1) + "\n")
    files = tuple(sorted(str(p.relative_to(dst)) for p in dst.rglob("*") if p.is_file()))
    return Release(dst, tuple(nb.name for nb in notebooks), files)
