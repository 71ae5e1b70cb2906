"""Run All on a fresh student copy, with no guess set: no reveal shows its answer and each records "no guess".

Then every right answer is committed, as a student would after seeing the measurements below the
reveals, and the journal scores each as "after reveal" (not counted). Each notebook source runs in a
child process (tests/notebook_runner.py) in its own folder, its journal beside it. Slow: every notebook
is run in full (marked ``procs``); ``-k 07`` runs one.

The same checks (tests/reveal_checks.py) run on the student copies in the browser test
(tests/test_browser.py). Where that test can run (Debian's Chromium and playwright here, as in CI),
the notebooks it runs are skipped here, so each is run twice in all, not three times;
``LABKIT_RUN_ALL=1`` runs them here anyway.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from browser_helpers import BROWSER_NOTEBOOKS, browser_missing
from reveal_checks import check_nothing_revealed, check_recorded, leaks

from labkit.teach import journal

ROOT = Path(__file__).resolve().parent.parent
SOURCES = sorted((ROOT / "tools" / "notebooks").glob("0*.py"))
IN_BROWSER = {name[:2] for name in BROWSER_NOTEBOOKS}


def test_leaks_are_found_above_the_reveal_only():
    cells = [{"index": 0, "source": "", "output": "needs 108.6 GB"},
             {"index": 1, "source": 'reveal(g, key="k")', "output": "108.6"}]
    assert leaks(cells, {"k": 108.6472}) == ["k: 108.6 printed in cell 0, above its reveal"]
    assert leaks(cells[1:], {"k": 108.6472}) == [] and leaks(cells, {"k": 4}) == []


def test_the_browser_test_covers_each_notebook_skipped_here():
    """Skipping here is safe only for notebooks the browser test runs: each has a source here."""
    assert IN_BROWSER and IN_BROWSER <= {s.name[:2] for s in SOURCES}


@pytest.mark.parametrize("source", SOURCES, ids=[s.name[:2] for s in SOURCES])
def test_run_all_reveals_nothing_and_records_no_guess(source, tmp_path, request):
    notebook = source.name[:2]
    browser_runs = any(item.path.name == "test_browser.py" for item in request.session.items)
    if (notebook in IN_BROWSER and browser_runs and not browser_missing()
            and os.environ.get("LABKIT_RUN_ALL") != "1"):
        pytest.skip(f"{notebook}: tests/test_browser.py runs these checks on its student copy in Chromium "
                    "(LABKIT_RUN_ALL=1 runs them here too)")
    env = os.environ | {"LABKIT_JOURNAL": str(tmp_path / journal.FILENAME),
                        "LABKIT_ANSWER_SINK": str(tmp_path / "answers.jsonl"), "MPLBACKEND": "Agg",
                        "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, str(ROOT / "tests" / "notebook_runner.py"), str(source), str(tmp_path)],
                          env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = json.loads((tmp_path / "run.json").read_text())
    failed = [c for c in run["cells"] if not c["ok"]]
    assert not failed, failed[0]["output"][-3000:]
    answers = {a["key"]: a["answer"] for a in run["answers"]}
    check_nothing_revealed(notebook, run["cells"], answers)
    check_recorded(notebook, tmp_path / journal.FILENAME, answers, committed=True)
