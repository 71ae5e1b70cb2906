"""Run All on a fresh student copy, with no guess set: no reveal shows its answer and each records "no guess".

Then every right answer is committed, as a student would after seeing the measurements below the
reveals, and the journal scores each as "after reveal" (not counted). Each notebook source runs in a
child process (tests/notebook_runner.py) in its own folder, its journal beside it. Slow: every notebook
is run in full (marked ``procs``); ``-k 07`` runs one.
"""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from labkit.teach import handin, journal
from labkit.teach.predictions import NO_GUESS, notebook_keys

ROOT = Path(__file__).resolve().parent.parent
SOURCES = sorted((ROOT / "tools" / "notebooks").glob("0*.py"))


def texts(value: object) -> set[str]:
    """How a numeric answer would read if printed: distinctive renderings only (3 significant digits or more)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or abs(value) < 10 or value != value:
        return set()
    out = {f"{value:,.0f}", f"{value:.0f}"} if abs(value) >= 100 else set()
    if not float(value).is_integer():
        out |= {f"{value:.1f}", f"{value:.2f}"}
    return out


def leaks(cells: list[dict], answers: dict[str, object]) -> list[str]:
    """Each numeric answer printed by a cell above its reveal's cell (progress bars left out)."""
    found = []
    for key, value in answers.items():
        at = next(i for i, c in enumerate(cells) if f'key="{key}"' in c["source"])
        for c in cells[:at]:
            text = "\n".join(line for line in c["output"].splitlines() if "it/s" not in line and "s/it" not in line)
            for t in texts(value):
                if re.search(r"(?<![\d.,])" + re.escape(t) + r"(?![\d])", text):
                    found.append(f"{key}: {t} printed in cell {c['index']}, above its reveal")
    return found


def test_leaks_are_found_above_the_reveal_only():
    cells = [{"index": 0, "source": "", "output": "needs 108.6 GB"},
             {"index": 1, "source": 'reveal(g, key="k")', "output": "108.6"}]
    assert leaks(cells, {"k": 108.6472}) == ["k: 108.6 printed in cell 0, above its reveal"]
    assert leaks(cells[1:], {"k": 108.6472}) == [] and leaks(cells, {"k": 4}) == []


@pytest.mark.parametrize("source", SOURCES, ids=[s.name[:2] for s in SOURCES])
def test_run_all_reveals_nothing_and_records_no_guess(source, tmp_path):
    env = os.environ | {"LABKIT_JOURNAL": str(tmp_path / journal.FILENAME),
                        "LABKIT_ANSWER_SINK": str(tmp_path / "answers.jsonl"), "MPLBACKEND": "Agg",
                        "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, str(ROOT / "tests" / "notebook_runner.py"), str(source), str(tmp_path)],
                          env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = json.loads((tmp_path / "run.json").read_text())
    failed = [c for c in run["cells"] if not c["ok"]]
    assert not failed, failed[0]["output"][-3000:]
    keys = notebook_keys(source.name[:2])
    reveals = [c for c in run["cells"] if "key=\"" in c["source"] and ".predict." in c["source"]]
    shown = "\n".join(c["output"] for c in reveals)
    for key in keys:
        assert f"No guess committed for {key}, so its answer stays hidden" in shown, key
    assert "Right" not in shown and "Wrong" not in shown and "You passed" not in shown

    assert not leaks(run["cells"], {a["key"]: a["answer"] for a in run["answers"]})

    summary = handin.summarise(journal.entries(tmp_path / journal.FILENAME), [source.name[:2]])
    answers = {a["key"]: a["answer"] for a in run["answers"]}
    assert set(answers) == set(keys)
    for key in keys:
        item = summary["items"][key]
        assert item["status"] == NO_GUESS and item["after_reveal"] == [answers[key]], (key, item)
    assert summary["totals"]["predictions"]["right"] == 0
    assert summary["totals"]["predictions"]["no_guess"] == len(keys)
