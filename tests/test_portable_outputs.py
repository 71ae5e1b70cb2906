"""The portability tier: every notebook's checked outputs under each of another machine's settings.

``make test`` already runs each notebook's strict nbval under one foreign setting, alternating
(``tests/conftest.py``, ``tests/portable_settings.py``). ``make portability`` runs this file with
``LABKIT_PORTABILITY=all``: every notebook under every setting, each a real strict nbval run in a child
process whose kernel sees that setting, as an instructor can check on their own machine.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from portable_settings import KEYS, SETTINGS, setting_for

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "labs").glob("0*.ipynb"))
MATRIX = [(nb, s) for nb in NOTEBOOKS for s in SETTINGS]


def test_make_test_runs_every_notebook_under_a_foreign_setting_and_uses_each_setting():
    chosen = {nb: setting_for(nb) for nb in NOTEBOOKS}
    assert len(NOTEBOOKS) >= 9 and set(chosen.values()) == set(SETTINGS)
    assert all(SETTINGS[s] for s in chosen.values())  # each changes something


def test_every_setting_changes_what_a_kernel_sees():
    """Each setting reaches a fresh kernel: other-cpu takes torch off this CPU's vector kernels, one-thread takes
    the lab to one intra-op thread (both read back from torch in a child process, as a notebook kernel starts)."""
    probe = ("import torch, labkit.rig.train as t; t.seed_everything(); "
             "print(torch.backends.cpu.get_cpu_capability(), torch.get_num_threads())")
    seen = {}
    for name, setting in SETTINGS.items():
        env = {k: v for k, v in os.environ.items() if k not in KEYS} | setting
        out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        seen[name] = out.stdout.split()
    assert seen["other-cpu"][0] == "DEFAULT" and seen["one-thread"][1] == "1"


@pytest.mark.parametrize(("notebook", "setting"), MATRIX, ids=[f"{nb.name[:2]}-{s}" for nb, s in MATRIX])
def test_checked_outputs_are_the_same_under_another_machines_settings(notebook, setting, tmp_path):
    if os.environ.get("LABKIT_PORTABILITY") != "all":
        pytest.skip("the full matrix runs with `make portability` (LABKIT_PORTABILITY=all); make test runs each "
                    "notebook under one of these settings already")
    env = {k: v for k, v in os.environ.items() if k not in KEYS} | SETTINGS[setting] | {
        "LABKIT_JOURNAL": str(tmp_path / "labkit-journal.jsonl"), "MPLBACKEND": "Agg", "LABKIT_PORTABILITY": "own"}
    proc = subprocess.run([sys.executable, "-m", "pytest", "--nbval", "-q", str(notebook.relative_to(ROOT))],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, f"{notebook.name} under {setting} ({SETTINGS[setting]}):\n{proc.stdout[-6000:]}"
