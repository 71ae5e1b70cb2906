"""Coding exercises: the learner writes the heart of a technique, and the lab runs real tests on it.

A :class:`CodingExercise` holds the task and a ``run`` function that takes the learner's
function and returns one :class:`Case` per test, each checked against a real measurement
where one exists (the student's bytes-per-category function against a real training
step, for instance), so the exercise cannot be passed by matching a printed number.
``check_code(key, fn)`` returns the same ``Feedback`` as the numeric checks: right when
every case passes, otherwise the failing cases with what was expected. A stub that
still raises ``NotImplementedError`` (or returns None) is "not written yet".

Reference solutions live in the instructor key (``instructor/key.py``), outside the
package; the tests check that each reference passes and each blank stub fails.
Build-it exercises (:mod:`labkit.practice.build`) are the same idea for a whole component: the learner
writes a module, and the lab runs it on real process groups beside torch's own engine.
This package sits on the top floor, beside the advisor: it may read any topic.
"""

from __future__ import annotations

from labkit.practice import (  # noqa: F401, E402 - importing them registers their exercises
    build,
    checkpoint,
    eviction,
    footprint,
    layout,
    loss_scale,
    pipeline,
    reasoning,
    storage,
    swapping,
    tensor_parallel,
)
from labkit.practice.coding import (  # noqa: F401 - the package's API, as notebooks call it
    CODING,
    Case,
    CodingExercise,
    attempt,
    check_code,
    register,
    safely,
)
