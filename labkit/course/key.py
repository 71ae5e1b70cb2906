"""The instructor's answer key, computed by labkit: every self-check, reasoning answer, prediction and design task.

Self-checks and reasoning exercises print their answer from labkit's model with the tolerance
and the likely mistakes the check recognises; predictions print their question, and the value
the solved notebooks revealed when ``tools/build_notebooks.py`` last ran them (it records each
reveal's value in ``instructor/predictions.json``, outside the student release); design tasks
print a setting of their panel that meets them, found by :func:`labkit.course.design_key.find_solution`;
coding exercises point to their reference solution in ``instructor/key.py``, build-it exercises to
their reference module in ``instructor/build/``.
"""

from __future__ import annotations

import json
from pathlib import Path

from labkit.course.copies import ROOT
from labkit.course.design_key import find_solution
from labkit.course.regrade import exercises, quiet_panels
from labkit.practice.build import BUILDS
from labkit.teach import prediction_mistakes
from labkit.teach.predictions import PREDICTIONS

PREDICTION_ANSWERS = ROOT / "instructor" / "predictions.json"


def _fmt(x: float) -> str:
    return f"{x:.6g}"


def _revealed(path: Path) -> dict:
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def answer_key(designs: bool = True, answers: Path = PREDICTION_ANSWERS) -> str:
    """The key as text, notebook by notebook (``designs=False`` skips the design search, the slow part)."""
    from labkit import practice
    from labkit.practice import design

    registered = exercises()
    revealed = _revealed(answers)
    books = sorted({k[:2] for k in [*registered, *PREDICTIONS, *practice.CODING, *design.TASKS]})
    out = ["# labkit answer key (computed by labkit; instructors only)", ""]
    for nb in books:
        out.append(f"## notebook {nb}")
        for key, ex in registered.items():
            if key[:2] != nb:
                continue
            mistakes = "; ".join(f"{m.name} -> {_fmt(m.value())}" for m in ex.mistakes)
            out.append(f"- {key}: {_fmt(ex.answer())} (tolerance {100 * ex.rel_tol:g}%). {ex.question}")
            if mistakes:
                out.append(f"    recognised mistakes: {mistakes}")
        for key, pred in PREDICTIONS.items():
            if key[:2] == nb:
                value = revealed.get(key)
                shown = json.dumps(value) if value is not None else "not recorded: rebuild the notebook"
                out.append(f"- {key} ({pred.kind}): {pred.question}: {shown}")
                rules = prediction_mistakes.judging(key)
                if rules is not None and isinstance(value, int | float) and not isinstance(value, bool):
                    band = "exact" if rules.exact else f"tolerance {100 * rules.rel_tol:g}%"
                    values = prediction_mistakes.mistake_values(key, value)
                    named = "; ".join(f"{k} -> {_fmt(v)}" for k, v in values.items())
                    out.append(f"    {band}; recognised mistakes: {named}")
        for key, ex in practice.CODING.items():
            if key[:2] == nb:
                where = f"instructor/build/{BUILDS[key].stub} (build it yourself)" if key in BUILDS else \
                    "instructor/key.py"
                out.append(f"- {key}: reference solution in {where}. {ex.task.splitlines()[0]}")
        if nb in design.TASKS:
            with quiet_panels():
                solution = find_solution(nb) if designs else None
            shown = json.dumps(solution) if solution else ("skipped" if not designs else "none found on the grid")
            out.append(f"- {nb}.design: {design.TASKS[nb][0]}\n    a setting that meets it: {shown}")
        out.append("")
    return "\n".join(out)
