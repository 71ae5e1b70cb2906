"""Feedback that names the mistake: every exercise's likely mistakes are diagnosed; unit slips point the right way."""

import pytest

from labkit.teach import checks
from labkit.teach.diagnose import diagnose, slips


def _all_exercises() -> dict:
    from labkit.course import guide

    guide.exercise_table()  # imports every topic's exercises
    return checks.EXERCISES


@pytest.fixture(autouse=True)
def _fresh():
    checks.reset_attempts()


@pytest.mark.parametrize("key", sorted(_all_exercises()))
def test_every_exercise_lists_two_mistakes_none_of_which_passes(key):
    ex = checks.EXERCISES[key]
    right = ex.answer()
    assert len(ex.mistakes) >= 2, f"{key}: register at least two likely mistakes"
    assert len(ex.steps()) >= 2, f"{key}: two hint steps before the worked answer"
    for mistake in ex.mistakes:
        value = mistake.value()
        assert abs(value - right) > ex.rel_tol * abs(right) + 1e-12, (key, mistake.name, value, right)
        checks.reset_attempts(key)
        fb = checks.check(key, value)
        assert not fb and fb.diagnosis == mistake.name, (key, mistake.name, fb.diagnosis)
        assert mistake.name in str(fb)


@pytest.mark.parametrize("key", sorted(_all_exercises()))
def test_hints_come_before_the_worked_answer(key):
    ex = checks.EXERCISES[key]
    wrong = ex.answer() * 3.7 + 1.3  # no slip, no listed mistake
    first = str(checks.check(key, wrong))
    assert "Hint 1" in first and "Worked answer" not in first
    second = str(checks.check(key, wrong))
    assert "Hint 2" in second and "Worked answer" not in second
    for _ in range(len(ex.steps()) - 1):
        last = str(checks.check(key, wrong))
    assert "Worked answer" in last


# (asked, given): the learner answers in ``given`` where ``asked`` was asked, both ways round.
PAIRS = [("GB", "GiB"), ("GiB", "GB"), ("MB", "MiB"), ("MiB", "MB"), ("TB", "TiB"), ("TiB", "TB"),
         ("GB", "MB"), ("MB", "GB"), ("TB", "GB"), ("GB", "TB"), ("GB", "B"), ("B", "GB"),
         ("s", "min"), ("min", "s"), ("min", "h"), ("h", "min"), ("h", "days"), ("days", "h"), ("s", "ms"),
         ("kg", "g"), ("g", "kg"), ("kg", "t")]
SIZES = {"B": 1, "KB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40,
         "ms": 1e-3, "s": 1, "min": 60, "h": 3600, "days": 86400, "g": 1, "kg": 1e3, "t": 1e6}
WORDS = {"s": "seconds", "min": "minutes", "h": "hours", "days": "days", "ms": "milliseconds", "B": "bytes",
         "g": "grams", "kg": "kg", "t": "tonnes"}


@pytest.mark.parametrize("asked, given", PAIRS)
def test_each_unit_slip_is_named_both_ways(asked, given):
    right = 3.7
    value = right * SIZES[asked] / SIZES[given]  # the same quantity expressed in ``given``
    text = diagnose(value, right, unit=asked)
    assert text == f"{WORDS.get(given, given)} given where {WORDS.get(asked, asked)} were asked?", text


@pytest.mark.parametrize("unit", ["GB", "GiB", "MB", "MiB", "TB", "TiB"])
def test_the_binary_decimal_factor_applied_backwards_is_named_too(unit):
    twin = unit.replace("i", "") if "i" in unit else unit[0] + "i" + unit[1:]
    value = 3.7 * SIZES[twin] / SIZES[unit]
    assert "wrong way round" in diagnose(value, 3.7, unit=unit)


def test_a_mass_or_time_question_is_never_offered_a_byte_prefix():
    for unit in ("g", "kg", "t", "s", "min", "h", "days"):
        for slip in slips(unit):
            assert "B" not in slip.text.replace("bytes", "") and "bits" not in slip.text, (unit, slip.text)
    assert diagnose(56 * 1000, 56, unit="kg") == "grams given where kg were asked?"


def test_rates_fractions_and_per_bit_point_the_right_way():
    assert diagnose(7.76 / 24, 7.76, unit="/day") == "per hour given where per day was asked?"
    assert diagnose(0.3 * 24, 0.3, unit="/h") == "per day given where per hour was asked?"
    assert "percentage given where a fraction" in diagnose(71.4, 0.714, unit="fraction")
    assert "fraction (0..1) given where a percentage" in diagnose(0.45, 45, unit="%")
    assert "per-byte figure given where per bit" in diagnose(160, 20, unit="pJ/bit")
    assert "bits counted where bytes" in diagnose(128, 16, unit="B")


def test_self_checks_name_unit_slips_in_their_own_unit():
    young = checks.EXERCISES["06.young_minutes"].answer()
    assert checks.check("06.young_minutes", 60 * young).diagnosis == "seconds given where minutes were asked?"
    mtbf = checks.EXERCISES["01.mtbf_hours"].answer()
    assert checks.check("01.mtbf_hours", mtbf / 24).diagnosis == "days given where hours were asked?"
    co2 = checks.EXERCISES["07.co2_france"].answer()
    assert checks.check("07.co2_france", 1000 * co2).diagnosis == "grams given where kg were asked?"
    layer = checks.EXERCISES["01.gpt3_layer_gb"].answer()
    assert checks.check("01.gpt3_layer_gb", layer * 1e9 / 2**30).diagnosis == "GiB given where GB were asked?"


def test_the_issue_s_named_mistakes_are_diagnosed():
    """The slips the review named: attention term, sequence parallelism, one PCIe direction, the 2 in sqrt(2CM),
    one Adam moment, 16 instead of 20 B/param, and 0.702 for 0.714."""
    cases = {"01.gpt3_layer_gb": "attention term", "03.gpt3_tp8_sp_gb": "without sequence parallelism",
             "04.pcie_seconds": "both directions", "06.young_minutes": "the 2 in sqrt(2CM)",
             "05.adam8bit_gb": "one Adam moment", "04.infinity_tb": "16 bytes per parameter",
             "05.reason.selective_share": "over ALL the activations"}
    for key, named in cases.items():
        ex = checks.EXERCISES[key]
        mistake = next(m for m in ex.mistakes if named in m.name)
        checks.reset_attempts(key)
        fb = checks.check(key, mistake.value())
        assert not fb and named in fb.diagnosis, (key, fb.diagnosis)
    assert not checks.check("05.reason.selective_share", 0.702)
    assert checks.check("05.reason.selective_share", 0.714)


def test_a_prediction_names_its_listed_mistake_before_any_unit_slip():
    from labkit.teach.diagnose import named_mistake
    from labkit.teach.reveal import reveal_number

    mistakes = {"GPipe's m: 1F1B starts a backward once p - rank forwards are in flight": 8, "one": 1}
    assert named_mistake(8, 4, mistakes).startswith("GPipe's m") and named_mistake(5, 4, mistakes) == ""
    fb = reveal_number(8, 4, "1F1B, rank 0", "micro-batches", 1.0, mistakes=mistakes)
    assert not fb and "GPipe's m" in fb.diagnosis and "GPipe's m" in str(fb)
    assert "GiB" in reveal_number(4 * 2**30 / 1e9, 4, "size", "GB", 1.0, rel_tol=0.01, mistakes=mistakes).diagnosis


def test_notebook_predictions_with_listed_mistakes_list_two_or_more():
    """Every reveal_number call that still lists mistakes lists at least two (the registry,
    labkit.teach.prediction_mistakes, holds every prediction's own: tests/test_prediction_mistakes.py)."""
    import ast
    from pathlib import Path

    calls = 0
    for path in sorted((Path(__file__).resolve().parent.parent / "tools" / "notebooks").glob("0*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "reveal_number":
                listed = next((k.value for k in node.keywords if k.arg == "mistakes"), None)
                if listed is not None:
                    calls += 1
                    assert isinstance(listed, ast.Dict) and len(listed.keys) >= 2, (path.name, node.lineno)
    assert calls >= 5  # 02 (3), 04 and 07 still list their own beside the registry's
