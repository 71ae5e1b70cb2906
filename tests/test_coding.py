"""The coding-exercise machinery: hint steps that follow the failed case, the submitted source kept for the hand-in."""

from labkit.practice.coding import Case, CodingExercise, source_of


def test_a_coding_hint_follows_the_case_that_failed_then_the_worked_answer():
    ex = CodingExercise("99.code.x", "write x", lambda fn: [], ("think about the order", "order by next use"),
                        "evict the furthest next use")
    adversarial = Case("adversarial trace", False, "3 misses", ("many uses, but late?", "next use, not uses left"))
    assert ex.steps_for([Case("plain", False), adversarial]) == ("many uses, but late?", "next use, not uses left",
                                                                 "Worked answer: evict the furthest next use")
    assert ex.steps_for([Case("plain trace", False)])[:2] == ("think about the order", "order by next use")


def test_the_source_is_kept_or_a_clear_note_given():
    def mine(x):
        return x + 1

    assert source_of(mine).startswith("def mine(x):")
    assert source_of(len).startswith("# source not available: len")
