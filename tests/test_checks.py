"""Exercises and reveals: exact counts, tolerances, named mistakes, hint steps, yes/no answers."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from labkit.errors import LabkitError
from labkit.teach import checks
from labkit.teach.diagnose import diagnose, same_text
from labkit.teach.reveal import reset_reveals


@pytest.fixture(autouse=True)
def _fresh():
    checks.reset_attempts()
    reset_reveals()


def test_zero3_same_traffic_as_dp_is_wrong_not_close():
    fb = checks.reveal_number(1.0, 1.5, "zero3 traffic / DDP traffic", "x", 1.0)
    assert not fb and "Wrong" in str(fb) and "33%" in str(fb)
    assert checks.reveal_number(1.45, 1.5, "zero3 traffic / DDP traffic", "x", 1.0)


def test_counts_are_judged_exactly():
    assert not checks.reveal_number(3, 2, "steps lost", "", 1)
    assert checks.reveal_number(2, 2, "steps lost", "", 1)
    assert "counts are judged exactly" in str(checks.reveal_number(2, 2, "steps", "", 1))


def test_tolerance_is_the_callers():
    assert checks.reveal_number(1.3, 1.05, "x", "", 1, rel_tol=0.5)
    assert not checks.reveal_number(1.3, 1.05, "y", "", 1, rel_tol=0.1)
    assert not checks.reveal_number(1.3, 1.0, "z", "", 1, rel_tol=0.5)  # a whole number with no unit is a count
    with pytest.raises(LabkitError, match="rel_tol"):
        checks.reveal_number(1, 1.5, "z", "", 1, rel_tol=-1)


def test_a_wrong_guess_never_prints_like_the_right_value():
    fb = checks.reveal_number(16.0004, 16.0, "bytes per parameter", "", 1, exact=True)
    assert not fb
    mine, theirs = same_text(16.0004, 16.0)
    assert mine != theirs and mine in str(fb)


@pytest.mark.parametrize("guess, right, slip", [
    (17.5e9, 17.5, "1e9"), (0.5 * 100, 0.5, "percentage"), (16 * 8, 16, "bits"),
    (80 * 2**30 / 1e9, 80, "GiB"), (80 * 1e9 / 2**30, 80, "GiB"), (2e-9, 2, "1e9"),
])
def test_unit_slips_are_named(guess, right, slip):
    assert slip in diagnose(guess, right)
    assert slip in str(checks.reveal_number(guess, right, "q", "", 1))


def test_no_diagnosis_for_an_honest_miss():
    assert diagnose(3.0, 2.0) == ""


@given(st.floats(min_value=1e-6, max_value=1e12), st.floats(min_value=1.2, max_value=5.0))
def test_same_text_tells_different_numbers_apart(x, f):
    a, b = same_text(x, x * f)
    assert a != b


def test_exercise_mistakes_are_named_and_hints_come_in_steps():
    first = checks.check("01.bytes_per_param", 18)
    assert not first and "DeepSpeed" in first.diagnosis and "Hint 1" in str(first) and "Worked" not in str(first)
    second = checks.check("01.bytes_per_param", 14)
    assert "gradients left out" in second.diagnosis and "Worked answer: 16" in str(second)
    assert checks.check("01.bytes_per_param", 16)
    assert "1e9" in checks.check("02.zero3_gb", 17.5e9).diagnosis
    assert "1/Nd left out" in checks.check("02.zero3_gb", 16 * 70).diagnosis
    assert "(p-1)/m" in checks.check("02.bubble", 7 / 32).diagnosis


def test_no_hint_before_a_first_try():
    fb = checks.check("01.zero_stage", None)
    assert not fb and "Hint" not in str(fb) and "Not answered yet" in str(fb)


def test_claims_accept_yes_and_no_text():
    assert checks.reveal_claims({"a": "yes", "b": "No"}, {"a": True, "b": False})
    fb = checks.reveal_claims({"a": "yes", "b": None}, {"a": True, "b": False})
    assert not fb and "1 of 2 right" in str(fb) and "b: no (no guess" in str(fb)
    with pytest.raises(LabkitError, match="must be one of True, False, 'yes', 'no'"):
        checks.reveal_claims({"a": "perhaps"}, {"a": True})


def test_a_guess_changed_after_the_reveal_is_noted():
    assert "Changed after the reveal" not in str(checks.reveal_number(3, 3, "n", "", 1))
    assert "first committed guess was 3" in str(checks.reveal_number(2, 3, "n", "", 1))
