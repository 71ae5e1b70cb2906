"""Coding hints (issue 20): named by the failed case, one step more per failed try, the worked answer only third.

Each exercise is fed a typical wrong solution (the ones issue 20 names: 08's "fewest remaining uses", 04's
planner over its budget and its largest-first swap rule, 06's write without fsync; and one per other
notebook). Try 1 names the failed case and shows its first hint step only, never the worked answer;
try 2 adds the second step; try 3 the worked answer. The reference solution then passes, and the count
starts again. The count is read from the journal, so a kernel restart keeps it.
"""

import os
import sys
from pathlib import Path

import pytest

from labkit import practice
from labkit.practice import checkpoint, eviction, storage, swapping
from labkit.teach import journal

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from instructor.key import REFERENCES  # noqa: E402


def fewest_remaining_uses(resident, future):  # 08: not Belady's MIN
    return min(sorted(resident), key=future.count)


def lru_like(resident, future):  # 08: ignores the future (evicts the smallest id)
    return min(resident)


def over_budget(acts, budget):  # 04: half an activation over; the simulated device would still fit it
    return REFERENCES["04.code.choose_swaps"](acts, budget + max(acts) / 2)


def largest_first(acts, budget):  # 04: the old hint's rule, swap the largest until the rest fits
    swap, kept = [False] * len(acts), sum(acts)
    for i in sorted(range(len(acts)), key=lambda k: -acts[k]):
        if kept <= budget:
            break
        swap[i], kept = True, kept - acts[i]
    return swap


def no_fsync(state, path):  # 06: atomic rename, but nothing flushed to disk before it
    import torch

    tmp = str(path) + ".tmp"
    torch.save(state, tmp)
    os.replace(tmp, path)


def sixteen_everywhere(n, precision):  # 01: ZeRO's 2 + 2 + 12 applied to fp32 too
    return {"parameters": 2 * n, "gradients": 2 * n, "optimizer": 12 * n}


def gpipe(rank, p, m):  # 02: all forwards, then all backwards
    return [("F", i) for i in range(m)] + [("B", i) for i in range(m)]


def input_split(w1, w2, rank, t):  # 03: the first linear split by its inputs
    return w1.chunk(t, 1)[rank], w2.chunk(t, 0)[rank]


def no_reset(scale, good, inf, interval):  # 05: the clean-step count survives an overflow
    if inf:
        return scale / 2, good
    good += 1
    return (scale * 2, 0) if good == interval else (scale, good)


def no_pue(j, pue, g, b, d, e):  # 07: IT energy taken for the site's
    return j / 3.6e6, j / 3.6e6 * g / 1000, b / d / e


def dp_only(psi, tp, pp, dp, zero):  # 09: ZeRO over dp, the model-parallel split forgotten
    return 16 * psi / dp


WRONG = [  # (key, wrong solution, words of the case that must fail, its hint steps)
    ("08.code.evict", fewest_remaining_uses, "adversarial trace", eviction.ADVERSARIAL),
    ("08.code.evict", lru_like, "a real step", eviction.REAL),
    ("04.code.choose_swaps", over_budget, "GPT-2 XL", swapping.OVER),
    ("04.code.choose_swaps", largest_first, "GPT-2 XL", swapping.MOVES),
    ("06.code.atomic_save", no_fsync, "flushed to disk", checkpoint.FSYNC),
    ("01.code.state_bytes", sixteen_everywhere, "fp32", storage.HINTS["fp32"]),
    ("02.code.one_f_one_b", gpipe, "p=2, m=4", None),
    ("03.code.mlp_shards", input_split, "t=2", None),
    ("05.code.update_scale", no_reset, "resets the clean-step count", None),
    ("07.code.footprint", no_pue, "Llama-2 7B", None),
    ("09.code.states_per_gpu", dp_only, "ZeRO stage 0", None),
]


@pytest.fixture(autouse=True)
def _one_measurement(monkeypatch):
    """01's cases train a real step per precision; three tries reuse one measurement."""
    real, seen = storage.measured_states, {}

    def once(precision, shape):
        key = (precision, tuple(sorted(shape.items())))
        if key not in seen:
            seen[key] = real(precision, shape)
        return seen[key]

    monkeypatch.setattr(storage, "measured_states", once)


def test_every_exercise_has_two_hint_steps_and_a_worked_answer():
    for key, ex in practice.CODING.items():
        steps = ex.steps_for([])
        assert len(steps) == 3 and steps[-1].startswith("Worked answer: ") and len(steps[-1]) > 40, key


@pytest.mark.parametrize("key,wrong,case,hints", WRONG, ids=[f"{k}-{w.__name__}" for k, w, _, _ in WRONG])
def test_a_wrong_solution_gets_its_cases_hints_one_step_per_try(key, wrong, case, hints):
    ex = practice.CODING[key]
    first = practice.check_code(key, wrong)
    failed_names = [line[6:] for line in str(first).splitlines() if line.startswith("FAIL  ")]
    assert not first and case in first.diagnosis, str(first)  # the feedback names the case that failed
    assert failed_names and failed_names[0].startswith(first.diagnosis)
    text = str(first)
    step1 = next(line for line in text.splitlines() if line.startswith("Hint 1: "))[8:]
    if hints is not None:
        assert step1 == hints[0]  # the hint of the case that failed, not a general one
    assert step1 != ex.steps_for([])[0] or hints is None
    assert "Hint 2" not in text and "Worked answer" not in text and ex.worked not in text
    second = str(practice.check_code(key, wrong))
    assert "Hint 1: " in second and "Hint 2: " in second and "Worked answer" not in second
    third = str(practice.check_code(key, wrong))
    assert f"Worked answer: {ex.worked}" in third and "Try again" not in third
    assert practice.check_code(key, REFERENCES[key])
    again = str(practice.check_code(key, wrong))  # a pass resets the count
    assert "Hint 1: " in again and "Hint 2" not in again


def test_the_hint_follows_the_case_that_failed():
    """Two wrong policies of one exercise fail different cases and read different first hints."""
    a = str(practice.check_code("08.code.evict", fewest_remaining_uses))
    journal.record("coding", "08.code.evict", "reset", True)  # start the count again
    b = str(practice.check_code("08.code.evict", lru_like))
    assert f"Hint 1: {eviction.ADVERSARIAL[0]}" in a and f"Hint 1: {eviction.REAL[0]}" in b


def test_the_count_survives_a_kernel_restart(monkeypatch):
    practice.check_code("09.code.states_per_gpu", dp_only)
    monkeypatch.setattr(journal, "SESSION", "restarted")
    monkeypatch.setattr(journal, "_HEADS", {})
    assert "Hint 2: " in str(practice.check_code("09.code.states_per_gpu", dp_only))


def test_a_stub_or_none_is_not_a_failed_try():
    def stub(*a):
        raise NotImplementedError

    for fn in (None, stub):
        assert "Not written yet" in str(practice.check_code("09.code.states_per_gpu", fn))
    assert practice.coding.failed_tries("09.code.states_per_gpu") == 0


def test_an_exception_gets_the_general_hint_first():
    fb = str(practice.check_code("09.code.states_per_gpu", lambda *a: 1 / 0))
    assert "raised ZeroDivisionError" in fb
    assert f"Hint 1: {practice.CODING['09.code.states_per_gpu'].steps_for([])[0]}" in fb
