"""Instructors only: a setting of each notebook's design panel that meets its task, found by search.

It is left out of the student release (:mod:`labkit.course.release`): the panels' checks (in
:mod:`labkit.practice.design`) say whether a learner's setting meets the goal, and that is all a student's
copy needs; a solution found for them is an answer. ``python -m labkit.course key`` prints these, and the
tests use them to show that every task has a solution.
"""

from __future__ import annotations

import itertools

from labkit.errors import require_choice
from labkit.practice.design import TASKS

SEARCH: dict[str, dict[str, list]] = {
    "01": {"precision": ["bf16-mixed", "fp32"], "recompute": ["none", "selective", "full"],
           "zero_stage": [0, 1, 2, 3], "dp": [1, 2, 4, 8], "micro_batch": [1]},
    "02": {"schedule": ["1f1b", "interleaved"], "chunks": [1, 2, 3], "microbatches": [64, 96], "dp": [8]},
    "03": {"mode": ["1d", "2d", "2.5d", "3d"], "devices": [8, 16, 64], "depth": [1, 2]},
    "04": {"policy": ["vdnn-all", "swapadvisor"], "link_gbps": [16.0, 32.0, 64.0]},
    "05": {"optimizer_bits": [32, 8], "precision": ["bf16-mixed", "fp32"],
           "recompute": ["none", "selective", "sqrt", "full"]},
    "06": {"gpus": list(range(16384, 32769, 1024))},
    "07": {"model": ["llama2-70b", "gpt3-175b"], "gpu": ["H100-SXM", "A100-80GB"], "gpus": [0, 512],
           "batch": [32.0, 4096.0]},
    "08": {"array_size": [128, 256], "reads": [8, 16], "adc_bits": [9, 10]},
    "09": {"model": ["llama2-70b"], "gpu": ["H100-SXM"], "seq": [4096], "batch": [1024], "goal": ["fastest"],
           "gpus": [256, 512, 1024, 2048]},
}


def find_solution(key: str) -> dict | None:
    """The first setting of ``SEARCH[key]`` that meets task ``key`` on a fresh panel, or None."""
    require_choice("design task", key, TASKS)
    goal, check, make = TASKS[key]
    panel = make()
    grid = SEARCH[key]
    for values in itertools.product(*grid.values()):
        setting = dict(zip(grid, values, strict=True))
        panel.set_values(**setting)
        if check(panel)[0]:
            return setting
    return None
