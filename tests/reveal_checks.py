"""The checks a "Run All" with no guess must pass, shared by the browser test and the IPython runner test.

A prediction is worth making only before its answer is seen (labkit/teach/predictions.py). So a
run of a fresh student copy with every guess left at None must show no verdict, must record
"no guess" for each registered prediction of the notebook, and must print no answer above its
reveal; a right answer committed afterwards must be scored "after reveal", never "right".
tests/test_browser.py runs these on the student copies in JupyterLab (what CI runs);
tests/test_run_all.py runs them on the notebook sources in an IPython shell where no browser is.

A cell here is ``{"index": int, "source": str, "output": str}`` (the text its output shows).
"""

from __future__ import annotations

import re
from pathlib import Path

from labkit.teach import handin, journal
from labkit.teach.predictions import NO_GUESS, notebook_keys


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


def check_nothing_revealed(notebook: str, cells: list[dict], answers: dict[str, object]) -> None:
    """After Run All with no guess: each reveal says "no guess", none gives a verdict, no answer shows above it.

    ``answers`` are the values the reveals knew (``$LABKIT_ANSWER_SINK``), one per registered prediction.
    """
    keys = notebook_keys(notebook)
    reveals = [c for c in cells if 'key="' in c["source"] and ".predict." in c["source"]]
    shown = "\n".join(c["output"] for c in reveals)
    for key in keys:
        assert f"No guess committed for {key}, so its answer stays hidden" in shown, key
    for verdict in ("Right", "Wrong", "You passed"):
        assert verdict not in shown, f"{notebook}: a reveal says {verdict!r} with no guess committed"
    assert set(answers) == set(keys), f"{notebook}: reveals that ran {sorted(answers)}, registered {keys}"
    assert not leaks(cells, answers)


def check_recorded(notebook: str, journal_file: Path, answers: dict[str, object], committed: bool) -> None:
    """The journal scores each of the notebook's predictions "no guess"; once ``committed``, the right
    answer each was given afterwards is kept as "after reveal" (not counted as right)."""
    keys = notebook_keys(notebook)
    mine = [e for e in journal.entries(journal_file) if e.notebook == notebook]
    summary = handin.summarise(mine, [notebook])
    for key in keys:
        item = summary["items"].get(key)
        assert item is not None, f"{key}: nothing in the journal"
        after = [answers[key]] if committed else []
        assert item["status"] == NO_GUESS and item["after_reveal"] == after, (key, item)
    assert summary["totals"]["predictions"]["right"] == 0
    assert summary["totals"]["predictions"]["no_guess"] == len(keys)


def commit_source(answers: dict[str, object]) -> str:
    """A learner's cell committing each right answer after Run All (what the reveals' cells below showed)."""
    import json

    return ("import json\nfrom labkit.teach import checks\n"
            f"answers = json.loads({json.dumps(json.dumps(answers))})\n"
            "for key, answer in answers.items():\n    checks.predict(key, answer)\n"
            "print(f'committed {len(answers)} answers')\n")
