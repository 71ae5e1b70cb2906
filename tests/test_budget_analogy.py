import pytest
from hypothesis import given
from hypothesis import strategies as st

from labkit.errors import LabkitError
from labkit.predict.budget_analogy import scaled_budget


@given(st.integers(1, 10**12), st.integers(1, 10**13), st.integers(1_000, 10**9))
def test_the_micro_budget_keeps_the_real_ratio(capacity: int, states: int, micro: int) -> None:
    b = scaled_budget(capacity, states, micro)
    exact = capacity / states * micro
    assert b.budget_bytes == max(1, round(exact))
    # Half a byte of rounding over the micro states, plus float64's relative rounding of a ratio whose budget
    # exceeds 2**53 bytes (hypothesis found 9.0e15 B: exact integers stop there).
    slack = 0.5 / micro * (1 + 1e-9) + 4 * 2**-52 * b.real_ratio
    assert b.budget_bytes == 1 or abs(b.micro_ratio - b.real_ratio) <= slack


def test_a_card_that_holds_a_quarter_of_the_states_gives_a_quarter_budget() -> None:
    b = scaled_budget(25, 100, 1_000_000)
    assert b.budget_bytes == 250_000 and b.real_ratio == b.micro_ratio == 0.25


@pytest.mark.parametrize("field, args", [("real_capacity_bytes", (0, 1, 1)), ("real_states_bytes", (1, -1.0, 1)),
                                         ("micro_states_bytes", (1, 1, 0))])
def test_bad_sizes_name_the_field(field: str, args: tuple) -> None:
    with pytest.raises(LabkitError, match=field):
        scaled_budget(*args)
