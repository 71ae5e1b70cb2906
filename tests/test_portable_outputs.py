"""The portability tier: every notebook's checked outputs, re-run as another machine would run them.

Strict nbval compares each notebook with the outputs stored when it was built. A machine with other
CPU kernels or another thread count must print the same checked outputs (figures from trained floats
at a precision no such change reaches, bytes and counts exactly), or the lab is red on every machine
but the one that built it. Each test here runs strict nbval itself, in a child process whose kernel
sees another machine's settings:

* ``other-cpu``: torch's portable kernels instead of this CPU's vector ones (``ATEN_CPU_CAPABILITY``),
  MKL and oneDNN held to AVX2 (``MKL_ENABLE_INSTRUCTIONS``, ``ONEDNN_MAX_CPU_ISA``), and numpy's
  OpenBLAS on its Haswell kernels (``OPENBLAS_CORETYPE``): the GEMMs and reductions of a machine without
  AVX-512;
* ``one-thread``: the lab's intra-op thread count at 1 (``LABKIT_THREADS``, ``OMP_NUM_THREADS``), which
  changes how reductions are split.

To keep ``make test`` within its budget each notebook runs under one of the two (they alternate);
``LABKIT_PORTABILITY=all`` runs every notebook under both, as an instructor can on their own machine.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "labs").glob("0*.ipynb"))
SETTINGS: dict[str, dict[str, str]] = {
    "other-cpu": {"ATEN_CPU_CAPABILITY": "default", "MKL_ENABLE_INSTRUCTIONS": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2",
                  "OPENBLAS_CORETYPE": "Haswell"},
    "one-thread": {"LABKIT_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"},
}


def cases() -> list[tuple[Path, str]]:
    """(notebook, setting) pairs: alternating settings, or every pair under ``LABKIT_PORTABILITY=all``."""
    names = list(SETTINGS)
    if os.environ.get("LABKIT_PORTABILITY") == "all":
        return [(nb, s) for nb in NOTEBOOKS for s in names]
    return [(nb, names[i % len(names)]) for i, nb in enumerate(NOTEBOOKS)]


def test_every_notebook_runs_under_a_foreign_setting_and_both_settings_are_used():
    chosen = cases()
    assert {nb for nb, _ in chosen} == set(NOTEBOOKS) and len(NOTEBOOKS) >= 9
    assert {s for _, s in chosen} == set(SETTINGS)


@pytest.mark.parametrize(("notebook", "setting"), cases(), ids=[f"{nb.name[:2]}-{s}" for nb, s in cases()])
def test_checked_outputs_are_the_same_under_another_machines_settings(notebook, setting, tmp_path):
    env = os.environ | SETTINGS[setting] | {"LABKIT_JOURNAL": str(tmp_path / "labkit-journal.jsonl"),
                                            "MPLBACKEND": "Agg"}
    proc = subprocess.run([sys.executable, "-m", "pytest", "--nbval", "-q",
                           str(notebook.relative_to(ROOT))], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=900)
    assert proc.returncode == 0, f"{notebook.name} under {setting} ({SETTINGS[setting]}):\n{proc.stdout[-6000:]}"
