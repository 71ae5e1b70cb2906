"""The coding-exercise machinery: hints that follow the failed case, the submitted source kept for the hand-in."""

from labkit.practice.coding import Case, CodingExercise, source_of


def test_a_coding_hint_follows_the_case_that_failed():
    ex = CodingExercise("99.code.x", "write x", lambda fn: [], "think about the order",
                        case_hints=(("adversarial", "fewest uses is not furthest next use"),))
    assert ex.hint_for([Case("adversarial trace", False)]) == "fewest uses is not furthest next use"
    assert ex.hint_for([Case("plain trace", False)]) == "think about the order"


def test_the_source_is_kept_or_a_clear_note_given():
    def mine(x):
        return x + 1

    assert source_of(mine).startswith("def mine(x):")
    assert source_of(len).startswith("# source not available: len")
