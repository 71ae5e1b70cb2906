"""Every design task the lab sets has a solution on its own panel, and the check says what is missing."""

import pytest

from labkit.practice import design


@pytest.mark.parametrize("key", sorted(design.TASKS))
def test_every_design_task_has_a_solution_on_its_panel(key):
    assert design.find_solution(key) is not None


def test_the_check_names_what_is_missing():
    panel = design.TASKS["01"][2]().set_task(design.task("01"))
    met, reason = panel.check_design()
    assert not met and "GiB to spare" in reason
    panel.dp.value = 16
    assert "at most 8 GPUs" in panel.check_design()[1]
    panel.set_values(**design.find_solution("01"))
    assert panel.check_design()[0] and "Goal met" in panel.task_result.value
