"""Notebook 05's coding exercise: dynamic loss scaling, step for step against torch's own GradScaler.

The learner writes ``update_scale(scale, good_steps, found_inf, growth_interval)`` returning
``(new_scale, new_good_steps)``: fp16 training multiplies the loss by ``scale`` so small
gradients do not flush to zero, skips a step whose gradients overflowed and halves the
scale, and doubles it after ``growth_interval`` clean steps in a row (Micikevicius et al.,
"Mixed Precision Training", ICLR 2018, section 3.2). Each case runs a real
``torch.amp.GradScaler`` on a real parameter whose gradient is made to overflow at chosen
steps, and compares the learner's scale with torch's after every step.
"""

from __future__ import annotations

from collections.abc import Callable

from labkit.practice.coding import Case, CodingExercise, attempt, register
from labkit.rig.step import optimizer_step

PATTERNS = (
    ("no overflow, growth interval 3", (False,) * 8, 3),
    ("overflow at steps 2 and 3, interval 2", (False, False, True, True, False, False, False), 2),
    ("an overflow resets the clean-step count, interval 3", (False, False, True, False, False, False, False), 3),
)


OVERFLOW = ("What does GradScaler do to the scale on a step whose gradients overflowed, and to its count of clean "
            "steps?",
            "On an overflow the scale halves (backoff factor 0.5) and the count of clean steps starts again from 0.")
CLEAN = ("What does GradScaler count on a clean step, and when does the scale grow?",
         "Each clean step adds one to the count; when it reaches growth_interval the scale doubles and the count "
         "goes back to 0.")


def torch_scales(overflows: tuple[bool, ...], interval: int, init: float = 2.0**16) -> list[float]:
    """The scale torch's GradScaler holds after each step, gradients overflowing where ``overflows`` says."""
    import torch

    scaler = torch.amp.GradScaler("cpu", init_scale=init, growth_interval=interval)
    p = torch.nn.Parameter(torch.ones(4))
    opt = torch.optim.SGD([p], lr=0.0)
    out = []
    for inf in overflows:
        scaler.scale(p.sum()).backward()
        if inf:
            p.grad[0] = float("inf")
        optimizer_step(opt, scaler=scaler)
        out.append(float(scaler.get_scale()))
    return out


def _scales(fn: Callable, overflows: tuple[bool, ...], interval: int) -> list[float]:
    """The learner's scale after each step, starting where torch's GradScaler starts."""
    scale, good, out = 2.0**16, 0, []
    for inf in overflows:
        scale, good = fn(scale, good, inf, interval)
        out.append(float(scale))
    return out


def run(fn: Callable[[float, int, bool, int], tuple[float, int]]) -> list[Case]:
    cases = []
    for name, overflows, interval in PATTERNS:
        want = torch_scales(overflows, interval)
        got, failed = attempt(name, lambda o=overflows, i=interval: _scales(fn, o, i))
        if failed:
            cases.append(failed)
            continue
        bad = next((k for k, (a, b) in enumerate(zip(got, want, strict=True)) if a != b), None)
        cases.append(Case(name, bad is None, "" if bad is None else
                          f"after step {bad} ({'an overflow' if overflows[bad] else 'a clean step'}) torch's "
                          f"GradScaler holds {want[bad]:g}, yours {got[bad]:g}",
                          () if bad is None else (OVERFLOW if overflows[bad] else CLEAN)))
    return cases


register(CodingExercise(
    "05.code.update_scale",
    "Write update_scale(scale, good_steps, found_inf, growth_interval) -> (new_scale, new_good_steps): the loss "
    "scale after one fp16 step, as torch's GradScaler keeps it (halve on overflow, double after growth_interval "
    "clean steps).",
    run,
    ("Two events change the scale: an overflow, and a run of clean steps. What does GradScaler do at each, and what "
     "happens to its count of clean steps?",
     "Return a pair (new_scale, new_good_steps) for one step."),
    "on an overflow return (scale * 0.5, 0); otherwise count the step, good = good_steps + 1, and return "
    "(scale * 2, 0) when good reaches growth_interval, else (scale, good).",
))
