"""What the course guide (notebook 00) prints: its exercises and predictions, counted from the registries."""

from __future__ import annotations

import importlib

from labkit import practice
from labkit.teach import checks
from labkit.teach.predictions import PREDICTIONS

TOPIC_EXERCISES = ("storage", "inter_layer", "intra_layer", "offload", "reduction", "resilience", "economics", "future",
                   "advisor")


def exercise_table() -> str:
    """Exercises per notebook, from the registries (importing each topic and the practice package registers them)."""
    for topic in TOPIC_EXERCISES:
        importlib.import_module(f"labkit.{topic}.exercises")
    rows: dict[str, list[int]] = {}
    for key in checks.EXERCISES:
        rows.setdefault(key[:2], [0, 0, 0, 0])[1 if ".reason." in key else 0] += 1
    for key in practice.CODING:
        rows.setdefault(key[:2], [0, 0, 0, 0])[2] += 1
    for key in PREDICTIONS:
        rows.setdefault(key[:2], [0, 0, 0, 0])[3] += 1
    lines = ["notebook  self-checks  reasoning  coding  predictions",
             "--------  -----------  ---------  ------  -----------"]
    lines += [f"{nb:>8}  {a:>11}  {b:>9}  {c:>6}  {d:>11}" for nb, (a, b, c, d) in sorted(rows.items())]
    return "\n".join(lines)
