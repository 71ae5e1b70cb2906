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
    assert "gradients left out" in second.diagnosis and "Hint 2" in str(second) and "Worked" not in str(second)
    tries = [checks.check("01.bytes_per_param", 14) for _ in range(len(checks.EXERCISES["01.bytes_per_param"].steps()))]
    assert "Worked answer: 16" in str(tries[-1])
    assert checks.check("01.bytes_per_param", 16)
    assert "bytes given where GB" in checks.check("02.zero3_gb", 17.5e9).diagnosis
    assert "1/Nd left out" in checks.check("02.zero3_gb", 16 * 70).diagnosis
    assert "(p-1)/m" in checks.check("02.bubble", 7 / 32).diagnosis


def test_no_hint_before_a_first_try():
    fb = checks.check("01.zero_stage", None)
    assert not fb and "Hint" not in str(fb) and "Not answered yet" in str(fb)


def test_claims_accept_yes_and_no_text():
    assert checks.reveal_claims({"a": "yes", "b": "No"}, {"a": True, "b": False})
    fb = checks.reveal_claims({"a": "yes", "b": None}, {"a": True, "b": False})
    assert not fb and "1 of 2 right" in str(fb) and "b: no (no guess" in str(fb)
    refused = checks.reveal_claims({"a": "perhaps"}, {"a": False})
    assert not refused and "must be one of True, False, 'yes', 'no'" in str(refused) and "a: no" not in str(refused)


def test_a_guess_changed_after_the_reveal_is_noted():
    key = "06.predict.rc_lost"
    assert "After the reveal" not in str(checks.reveal_number(3, 3, "n", "", 1, key=key))
    assert "After the reveal" not in str(checks.reveal_number(3, 3, "n", "", 1, key=key))  # a re-run is no change
    changed = checks.reveal_number(2, 3, "n", "", 1, key=key)
    assert "committed guess was 3" in str(changed) and "not scored" in str(changed)


def test_a_reveal_without_a_guess_shows_nothing_and_locks():
    key = "01.predict.llama7b_gb"
    fb = checks.reveal_number(None, 108.6e9, "Llama-2 7B needs", key=key)
    assert not fb and "108" not in str(fb) and "no guess" in str(fb)
    assert checks.predictions.state(key).committed == "no guess"
    late = checks.reveal_number(108, 108.6e9, "Llama-2 7B needs", key=key)
    assert late and "After the reveal, so not scored: your committed guess was no guess" in str(late)


def test_a_malformed_guess_reveals_nothing_and_does_not_lock():
    key = "02.predict.zero3_share"
    fb = checks.reveal_number("25%", 0.25, "share", "", 1.0, key=key)
    assert not fb and "must be a number" in str(fb) and "0.25 " not in str(fb).replace("like 0.25 or", "")
    assert not checks.predictions.state(key).revealed
    assert "must be a number" in str(checks.reveal_number(float("inf"), 0.25, "share", "", 1.0, key=key))
    first = checks.reveal_number(0.25, 0.25, "share", "", 1.0, key=key)
    assert first and "After the reveal" not in str(first)


def test_an_explicit_pass_shows_the_answer_as_no_guess():
    key = "08.predict.adc_bits"
    assert checks.predict(key, checks.PASS) is None
    fb = checks.reveal_number(None, 7, "ADC bits", "", 1, key=key)
    assert "You passed" in str(fb) and "7" in str(fb)
    assert checks.predictions.state(key).committed == "no guess"


def test_a_guess_committed_in_its_cell_is_what_the_reveal_judges():
    key = "05.predict.mixed_bytes"
    assert checks.predict(key, 16) == 16
    assert checks.predict(key, "sixteen") is None  # refused, not committed
    fb = checks.reveal_number(None, 16, "bytes", "", 1, key=key)
    assert fb and "you said 16" in str(fb)


def test_a_capitalised_choice_is_the_choice():
    fb = checks.reveal("Activations", {"activations": 3, "parameters": 1}, key="01.predict.largest_category")
    assert fb and "Right" in str(fb)


def test_wrong_never_ends_with_right_within():
    fb = checks.reveal_number(3, 1.0, "x", "x", 1)
    assert str(fb).startswith("Wrong") and "right within" not in str(fb)


def test_every_reveal_in_the_notebooks_carries_its_registered_id():
    import ast
    from pathlib import Path

    from labkit.teach.predictions import PREDICTIONS, notebook_keys

    for src in sorted((Path(__file__).resolve().parent.parent / "tools" / "notebooks").glob("0*.py")):
        keys = []
        for node in ast.walk(ast.parse(src.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", "") in ("reveal", "reveal_number",
                                                                                 "reveal_claims"):
                key = next((k.value for k in node.keywords if k.arg == "key"), None)
                assert isinstance(key, ast.Constant), f"{src.name}:{node.lineno}: a reveal without key="
                keys.append(key.value)
        assert sorted(keys) == sorted(notebook_keys(src.name[:2])), src.name
    assert all(k.split(".")[1] == "predict" for k in PREDICTIONS)
