"""No answer before its question: a prediction's answer never appears in the notebook source above where it is asked.

Each prediction is committed in a cell ``predicted_... = None``; the phrases below are the ways a
sentence or a printed line would give its answer away (the issue's review found each of the
first ones in a notebook). The scan reads every line above the commit cell, prose and code, with the comment marks, line
breaks and emphasis taken out, so a phrase split over two lines is still found.
"""

from pathlib import Path

import pytest

SOURCES = Path(__file__).resolve().parent.parent / "tools" / "notebooks"

ANSWERS: dict[tuple[str, str], tuple[str, ...]] = {
    ("01", "predicted_interruptions"): ("419",),
    ("02", "predicted_extra_traffic"): ("1.5x the", "1.5 times"),
    ("02", "predicted_gpipe_peak"): ("all m micro-batches are in flight", "holds all m micro-batches"),
    ("02", "predicted_1f1b_peak"): ("at most p micro-batches", "at most p - rank", "p micro-batches are in flight",
                                    "p micro-batches in flight"),
    ("02", "predicted_versions_stage0"): ("keeps p versions", "stashes p versions", "p weight versions"),
    ("04", "predicted_repeats"): ("the same every iteration", "the pattern repeats", "repeats every iteration"),
    ("04", "predicted_bytes_per_param"): ("4 bytes per parameter per step", "2 bytes each way"),
    ("06", "predicted_per_day_16k"): ("419 unexpected", "one every three hours", "every 3 hours", "a day on 16,384"),
    ("06", "predicted_per_day_100k"): ("a day on 100,000",),
}


def _source(notebook: str) -> list[str]:
    (path,) = SOURCES.glob(f"{notebook}_*.py")
    return path.read_text().splitlines()


@pytest.mark.parametrize("notebook, variable", sorted(ANSWERS))
def test_the_answer_is_not_above_the_question(notebook, variable):
    lines = _source(notebook)
    asked = next((i for i, line in enumerate(lines) if line.startswith(f"{variable} = None")), None)
    assert asked is not None, f"{notebook}: no cell commits {variable}"
    above = " ".join(line.lstrip("#").strip() for line in lines[:asked]).replace("*", "").lower()
    for phrase in ANSWERS[(notebook, variable)]:
        assert phrase.lower() not in above, f"{notebook}: {phrase!r} appears above the prediction {variable}"


def test_the_scan_finds_an_answer_where_there_is_one():
    """The scan is not vacuous: the phrases do occur below their questions, where the answer is revealed."""
    lines = "\n".join(_source("06")).lower()
    assert "per day on 16,384" in lines or "a day on 16,384" in lines or "failures a day" in lines
