"""Every numeric prediction names its likely mistakes (issue 20): each one, fed back, gets its own diagnosis.

The right answers are the ones the instructor's build recorded (``instructor/predictions.json``,
read, never written), so the mistakes are tested against what the notebooks actually reveal.
"""

import ast
import json
from pathlib import Path

import pytest

from labkit.teach import checks
from labkit.teach.choice_mistakes import CHOICES, CLAIMS
from labkit.teach.diagnose import slips
from labkit.teach.prediction_mistakes import NUMERIC, judging
from labkit.teach.predictions import PREDICTIONS

ROOT = Path(__file__).resolve().parent.parent
ANSWERS = json.loads((ROOT / "instructor" / "predictions.json").read_text())
NUMBERS = sorted(k for k, p in PREDICTIONS.items() if p.kind == "number")


@pytest.fixture(autouse=True)
def _own_journal(tmp_path, monkeypatch):
    monkeypatch.setenv("LABKIT_JOURNAL", str(tmp_path / "journal.jsonl"))


def _reveal(key: str, guess: float) -> checks.Feedback:
    return checks.reveal_number(guess, ANSWERS[key], "the answer", NUMERIC[key].unit, 1, key=key)


def test_every_numeric_prediction_is_registered_and_has_a_recorded_answer():
    assert len(NUMBERS) >= 25
    assert sorted(NUMERIC) == NUMBERS
    assert all(key in ANSWERS for key in NUMBERS)
    assert set(CHOICES) <= {k for k, p in PREDICTIONS.items() if p.kind == "choice"}
    assert set(CLAIMS) <= {k for k, p in PREDICTIONS.items() if p.kind == "claims"}


@pytest.mark.parametrize("key", NUMBERS)
def test_each_mistake_is_wrong_and_named_as_itself(key):
    rules, right = NUMERIC[key], ANSWERS[key]
    assert len(rules.mistakes) >= 2, f"{key}: register at least two likely mistakes"
    assert len({m.name for m in rules.mistakes}) == len(rules.mistakes)
    for mistake in rules.mistakes:
        wrong = mistake.value(right)
        assert abs(wrong - right) > rules.rel_tol * abs(right), (key, mistake.name, wrong, right)
        fb = _reveal(key, wrong)
        assert not fb and str(fb).startswith("Wrong"), (key, mistake.name, str(fb))
        assert fb.diagnosis == f"Likely mistake: {mistake.name}.", (key, mistake.name, fb.diagnosis)
        assert mistake.name in str(fb)


@pytest.mark.parametrize("key", NUMBERS)
def test_the_right_answer_passes_and_a_mistake_free_wrong_one_is_not_named(key):
    right = ANSWERS[key]
    fb = _reveal(key, right)
    assert fb and str(fb).startswith("Right (exactly)")
    if not NUMERIC[key].exact and right:
        near = right * (1 + 0.8 * NUMERIC[key].rel_tol)
        assert _reveal(key, near), (key, near)


@pytest.mark.parametrize("key", NUMBERS)
def test_unit_slips_are_still_named_in_the_question_s_own_unit(key):
    """Each slip of the question's unit family (both directions where the family has two) is named."""
    rules, right = NUMERIC[key], ANSWERS[key]
    if not right:
        pytest.skip("a zero answer has no ratio to slip by")
    family = rules.slips or rules.unit
    named = 0
    for slip in slips(family):
        if slip.factor < 0 or abs(slip.factor - 1) <= rules.rel_tol:
            continue  # the sign is no unit; a slip within the tolerance is judged right
        fb = _reveal(key, right * slip.factor)
        assert not fb and fb.diagnosis, (key, slip.text)
        mistake = next((m for m in rules.mistakes if m.matches(right * slip.factor, right, rules.rel_tol)), None)
        expected = f"Likely mistake: {mistake.name}." if mistake else f"Likely slip: {slip.text}"
        assert fb.diagnosis == expected, (key, slip.text, fb.diagnosis)
        named += mistake is None
    assert named >= 1 or family in ("x", "count", "micro-batches"), f"{key}: no unit slip is named"


def test_time_and_share_slips_point_both_ways():
    interval = ANSWERS["06.predict.best_interval"]
    assert "hours given where minutes" in _reveal("06.predict.best_interval", interval / 60).diagnosis
    rate = ANSWERS["06.predict.per_day_16k"]
    assert "per hour given where per day" in _reveal("06.predict.per_day_16k", rate / 24).diagnosis
    share = ANSWERS["02.predict.zero3_share"]
    assert "percentage given where a fraction" in _reveal("02.predict.zero3_share", 100 * share).diagnosis
    cut = ANSWERS["08.predict.stall_cut"]
    assert "fraction (0..1) given where a percentage" in _reveal("08.predict.stall_cut", cut / 100).diagnosis


def test_measurements_with_a_unit_are_not_counts():
    """16 B/param measured: 15.9 is right; Llama 3's 419 is a band, 400 right; counts stay exact."""
    assert _reveal("05.predict.mixed_bytes", 15.9)
    assert not _reveal("05.predict.mixed_bytes", 15)
    assert _reveal("01.predict.llama3_interruptions", 400)
    assert not _reveal("08.predict.adc_bits", ANSWERS["08.predict.adc_bits"] + 0.1)
    assert judging("05.predict.mixed_bytes").exact is False and judging("02.predict.gpipe_peak").exact


def test_the_issue_s_examples():
    assert "same bytes as DDP" in _reveal("02.predict.zero3_traffic", 1.0).diagnosis
    assert "forgot the 2" in _reveal("06.predict.best_interval", 6.0).diagnosis
    assert "p - 1" in _reveal("02.predict.one_f_one_b_peak", 3).diagnosis


def test_call_site_mistakes_still_work_beside_the_registry():
    extra = {"a listed mistake of the caller": 7.0}
    fb = checks.reveal_number(7.0, 2.0, "x", "", 1, key="04.predict.bytes_per_param", mistakes=extra)
    assert fb.diagnosis == "Likely mistake: a listed mistake of the caller."
    assert "one direction" in checks.reveal_number(2.0, 4.0, "x", "", 1, key="04.predict.bytes_per_param",
                                                   mistakes=extra).diagnosis
    assert checks.reveal_number(8, 4, "n", "", 1, mistakes={"m": 8}).diagnosis == "Likely mistake: m."


def test_a_typical_wrong_choice_is_diagnosed():
    fb = checks.reveal("optimizer", {"parameters": 1, "optimizer": 2, "activations": 3},
                       key="01.predict.largest_category")
    assert not fb and "Adam's two moments" in fb.diagnosis and "Adam's two moments" in str(fb)
    assert checks.reveal("activations", {"optimizer": 2, "activations": 3}, key="01.predict.largest_category")


def test_the_notebooks_show_each_prediction_in_its_registered_unit():
    """The registry's unit is what each notebook's reveal shows (the mistakes are values in that unit)."""
    seen = set()
    for path in sorted((ROOT / "tools" / "notebooks").glob("0*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "reveal_number":
                kw = {k.arg: k.value for k in node.keywords}
                key = ast.literal_eval(kw["key"])
                unit = ast.literal_eval(node.args[3] if len(node.args) > 3 else kw.get("unit", ast.Constant("GB")))
                scale = ast.literal_eval(node.args[4]) if len(node.args) > 4 else None
                assert unit == NUMERIC[key].unit, (path.name, key, unit)
                assert scale in (None, 1, 1.0) or unit == "GB", (path.name, key, scale)
                seen.add(key)
    assert seen == set(NUMERIC)


@pytest.mark.parametrize("key", sorted(CHOICES))
def test_each_registered_wrong_choice_is_diagnosed_against_the_recorded_answer(key):
    right, texts = CHOICES[key]
    assert right == ANSWERS[key] and len(texts) >= 2
    for chosen, why in texts.items():
        fb = checks.reveal(chosen, {right: 3, **{c: 1 for c in texts}}, key=key)
        assert not fb and fb.diagnosis == f"Likely mistake: {why}.", (key, chosen)


@pytest.mark.parametrize("key", sorted(CLAIMS))
def test_each_registered_claim_mistake_is_diagnosed_against_the_recorded_answer(key):
    truths = ANSWERS[key]
    for claim, mistake in CLAIMS[key].items():
        assert truths[claim] == mistake.truth, (key, claim)
        guesses = {c: ("no" if t else "yes") if c == claim else t for c, t in truths.items()}
        fb = checks.reveal_claims(guesses, truths, key=key)
        assert not fb and fb.diagnosis == mistake.why and f"Likely mistake: {mistake.why}." in str(fb)
    right = checks.reveal_claims(dict(truths), truths, key=key)
    assert right and right.diagnosis == ""


def test_a_stale_diagnosis_is_left_out_when_the_measurement_changes():
    key = "07.predict.offload_cheaper"
    fb = checks.reveal_claims({"offload rents for less": "no"}, {"offload rents for less": True}, key=key)
    assert not fb and fb.diagnosis == ""
    fb = checks.reveal("activations", {"optimizer": 3, "activations": 1}, key="01.predict.largest_category")
    assert not fb and fb.diagnosis == ""


def test_the_tensor_parallel_share_s_count_is_right_and_leaving_out_the_scores_is_named():
    """03: Korthikanti's count without dropout gives the measured share; without the scores it is the hint's trap."""
    from labkit.teach import prediction_mistakes as pm

    full = (pm._KEPT + (pm._SPLIT + pm._SCORES) / pm.TP) / (pm._KEPT + pm._SPLIT + pm._SCORES)
    assert _reveal("03.predict.act_share_tp4", full)
    assert "attention scores left out" in _reveal("03.predict.act_share_tp4", 0.4375).diagnosis


def test_the_instructor_s_key_can_list_each_prediction_s_mistakes():
    from labkit.teach.prediction_mistakes import mistake_values

    values = mistake_values("05.predict.mixed_bytes", ANSWERS["05.predict.mixed_bytes"])
    assert len(values) >= 2 and all(v != ANSWERS["05.predict.mixed_bytes"] for v in values.values())
    assert mistake_values("01.predict.largest_category", 1.0) == {}
