"""Coding exercises: every reference solution in the instructor key passes, every blank stub fails."""

import sys
from pathlib import Path

import pytest

from labkit import practice

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from instructor.key import REFERENCES  # noqa: E402


def _stub(*args, **kwargs):
    raise NotImplementedError


def test_every_coding_exercise_has_a_reference():
    """A function's reference is in instructor/key.py; a build-it exercise's is a module in instructor/build/
    (run by tests/test_build_*.py on real process groups)."""
    from labkit.practice.build.harness import BUILDS

    assert set(REFERENCES) == set(practice.CODING) - set(BUILDS)
    assert BUILDS and set(BUILDS) <= set(practice.CODING)
    root = Path(__file__).resolve().parent.parent / "instructor" / "build"
    assert all((root / ex.stub).is_file() for ex in BUILDS.values())


@pytest.mark.parametrize("key", sorted(REFERENCES))
def test_reference_passes_and_stub_fails(key):
    assert practice.check_code(key, REFERENCES[key]), str(practice.check_code(key, REFERENCES[key]))
    stub = practice.check_code(key, _stub)
    assert not stub and "Not written yet" in str(stub)
    assert not practice.check_code(key, None)


def test_a_plausible_wrong_answer_fails_with_the_case_named():
    def sixteen_everywhere(n, precision):  # ZeRO's 2 + 2 + 12 applied to fp32 too
        return {"parameters": 2 * n, "gradients": 2 * n, "optimizer": 12 * n}

    fb = practice.check_code("01.code.state_bytes", sixteen_everywhere)
    assert not fb and "FAIL  fp32" in str(fb) and "pass  bf16-mixed" in str(fb)


def test_an_exception_in_the_learners_code_is_a_named_failure():
    fb = practice.check_code("01.code.state_bytes", lambda n, p: {}["parameters"])
    assert not fb and "raised KeyError" in str(fb)


def test_gpipe_order_fails_the_memory_bound_and_a_deadlock_is_named():
    def gpipe(rank, p, m):
        return [("F", i) for i in range(m)] + [("B", i) for i in range(m)]

    fb = practice.check_code("02.code.one_f_one_b", gpipe)
    assert not fb and "GPipe's memory" in str(fb)

    def one_forward_first(rank, p, m):  # every rank starts backward after one forward: the last rank's B waits
        order = []
        for i in range(m):
            order += [("F", i), ("B", i)]
        return order

    fb = practice.check_code("02.code.one_f_one_b", one_forward_first)
    assert not fb and ("deadlock" in str(fb) or "bubble" in str(fb))


def test_a_plain_torch_save_is_torn_by_the_kill():
    import torch

    fb = practice.check_code("06.code.atomic_save", lambda state, path: torch.save(state, path))
    assert not fb and "does not load" in str(fb)


def test_a_save_without_fsync_passes_the_kills_but_not_the_flush_case():
    import os

    import torch

    def no_fsync(state, path):
        tmp = str(path) + ".tmp"
        torch.save(state, tmp)
        os.replace(tmp, path)

    fb = practice.check_code("06.code.atomic_save", no_fsync)
    assert not fb and "pass  SIGKILL after 1 B" in str(fb) and "FAIL  the new file is flushed to disk" in str(fb)
    assert "power cut" in str(fb)


def test_a_save_that_never_overwrites_or_hangs_is_caught():
    import time
    from pathlib import Path

    def never_overwrites(state, path):
        if not Path(path).exists():
            REFERENCES["06.code.atomic_save"](state, path)

    fb = practice.check_code("06.code.atomic_save", never_overwrites)
    assert not fb and "FAIL  a completed save replaces the old checkpoint" in str(fb)
    assert "still holds step 1" in str(fb)

    def hangs_on_the_new_state(state, path):
        if int(state["step"]) == 2:
            time.sleep(600)
        REFERENCES["06.code.atomic_save"](state, path)

    fb = practice.check_code("06.code.atomic_save", hangs_on_the_new_state)
    assert not fb and "nor finished within" in str(fb)


def test_splitting_the_first_linear_by_its_inputs_fails():
    fb = practice.check_code("03.code.mlp_shards", lambda w1, w2, r, t: (w1.chunk(t, 1)[r], w2.chunk(t, 0)[r].T.T))
    assert not fb and "FAIL" in str(fb)


def test_lru_misses_more_than_the_optimum_on_a_real_trace():
    from labkit.practice import eviction

    seq = eviction.accesses()

    def lru(resident, future, seen=seq):
        return min(resident, key=lambda b: max(i for i, x in enumerate(seen[: len(seen) - len(future)]) if x == b))

    fb = practice.check_code("08.code.evict", lru)
    assert not fb and "the optimum is" in str(fb)


def _swap_until_fits(acts, budget, largest):
    swap, kept = [False] * len(acts), sum(acts)
    for i in sorted(range(len(acts)), key=lambda k: -acts[k] if largest else acts[k]):
        if kept <= budget:
            break
        swap[i], kept = True, kept - acts[i]
    return swap


def test_swapping_everything_fits_but_moves_too_much():
    fb = practice.check_code("04.code.choose_swaps", lambda acts, budget: [True] * len(acts))
    assert not fb and "the greedy baseline moves" in str(fb)
    fb = practice.check_code("04.code.choose_swaps", lambda acts, budget: [False] * len(acts))
    assert not fb and "over the" in str(fb) and "budget" in str(fb)


def test_swap_order_rules_overshoot_and_the_budget_is_exact():
    for largest in (True, False):  # swapping in either order until the rest fits moves more than the baseline
        fb = practice.check_code("04.code.choose_swaps", lambda a, b, big=largest: _swap_until_fits(a, b, big))
        assert not fb and "the greedy baseline moves" in str(fb), str(fb)

    def half_an_activation_over(acts, budget):  # the simulated device would still fit it
        return REFERENCES["04.code.choose_swaps"](acts, budget + max(acts) / 2)

    fb = practice.check_code("04.code.choose_swaps", half_an_activation_over)
    assert not fb and "over the" in str(fb) and "FAIL  GPT-2 XL" in str(fb)


def test_fewest_remaining_uses_is_not_belady():
    def fewest_uses(resident, future):
        return min(sorted(resident), key=future.count)

    fb = practice.check_code("08.code.evict", fewest_uses)
    assert not fb and "FAIL  adversarial trace" in str(fb) and "NEXT use" in str(fb)


def test_a_scaler_that_never_resets_its_count_is_caught():
    def no_reset(scale, good, inf, interval):
        if inf:
            return scale / 2, good
        good += 1
        return (scale * 2, 0) if good == interval else (scale, good)

    fb = practice.check_code("05.code.update_scale", no_reset)
    assert not fb and "resets the clean-step count" in str(fb) and "torch's GradScaler holds" in str(fb)


def test_a_footprint_without_pue_is_caught():
    def no_pue(j, pue, g, b, d, e):
        return j / 3.6e6, j / 3.6e6 * g / 1000, b / d / e

    fb = practice.check_code("07.code.footprint", no_pue)
    assert not fb and "facility kWh" in str(fb)


def test_forgetting_the_model_parallel_split_is_caught():
    fb = practice.check_code("09.code.states_per_gpu", lambda psi, tp, pp, dp, z: 16 * psi / dp)
    assert not fb and "the advisor holds" in str(fb)


REASONING = {
    "01.reason.batch8_extra_gb": "whole step scaled by 8",
    "02.reason.microbatches_for_10pct": "(p-1)/m",
    "04.reason.offload_step_s": "all 4 bytes",
    "06.reason.young_factor": "like the MTBF",
    "07.reason.grid_ratio": "inverse ratio",
    "08.reason.break_even_70b": "70x",
    "09.reason.megatron_bubble_share": "dp split forgotten",
}


def test_every_notebook_has_a_reasoning_exercise():
    from labkit.teach import checks

    assert {k[:2] for k in checks.EXERCISES if ".reason." in k} == {f"0{i}" for i in range(1, 10)}


@pytest.mark.parametrize("key, named", sorted(REASONING.items()))
def test_reasoning_shortcuts_are_diagnosed(key, named):
    from labkit.teach import checks

    ex = checks.EXERCISES[key]
    assert checks.check(key, ex.answer())
    wrong = next(m for m in ex.mistakes if named in m.name)
    fb = checks.check(key, wrong.value())
    assert not fb and named in fb.diagnosis


def test_reasoning_unit_slips_are_diagnosed():
    from labkit.teach import checks

    share = checks.EXERCISES["05.reason.selective_share"].answer()
    assert "percentage" in checks.check("05.reason.selective_share", 100 * share).diagnosis
    assert "bytes given where GB" in checks.check("01.reason.batch8_extra_gb", 1e9 * _extra()).diagnosis


def _extra():
    from labkit.teach import checks

    return checks.EXERCISES["01.reason.batch8_extra_gb"].answer()


def _all_exercises():
    from labkit.course import guide
    from labkit.teach import checks

    guide.exercise_table()  # imports every topic's exercises
    return checks.EXERCISES


@pytest.mark.parametrize("key", sorted(_all_exercises()))
def test_every_known_mistake_gets_its_own_diagnosis(key):
    from labkit.teach import checks

    ex = checks.EXERCISES[key]
    right = ex.answer()
    for mistake in ex.mistakes:
        value = mistake.value()
        if abs(value - right) <= max(ex.rel_tol, 1e-3) * abs(right):
            continue  # a mistake that happens to give the right number cannot be told apart
        checks.reset_attempts(key)
        fb = checks.check(key, value)
        assert not fb and fb.diagnosis == mistake.name, (key, mistake.name, fb.diagnosis)
