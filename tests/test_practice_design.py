"""Every design task the lab sets has a solution on its own panel, and the check says what is missing."""

import pytest

from labkit.course.design_key import find_solution
from labkit.practice import design


@pytest.mark.parametrize("key", sorted(design.TASKS))
def test_every_design_task_has_a_solution_on_its_panel(key):
    assert find_solution(key) is not None


def test_the_check_names_what_is_missing():
    panel = design.TASKS["01"][2]().set_task(design.task("01"))
    met, reason = panel.check_design()
    assert not met and "GB to spare" in reason and "GiB" not in reason
    panel.dp.value = 16
    assert "at most 8 GPUs" in panel.check_design()[1]
    panel.set_values(**find_solution("01"))
    assert panel.check_design()[0] and "Goal met" in panel.task_result.value


def test_pipeline_task_names_the_bubble_the_batch_and_the_memory():
    panel = design.TASKS["02"][2]().set_task(design.task("02"))
    met, reason = panel.check_design()  # 1F1B, p=16, m=32: fits, but a third of the step is bubble
    assert not met and "simulated" in reason and "under 10%" in reason and "batch" not in reason
    panel.set_values(microbatches=384)  # the bubble shrinks, but 384 x 8 sequences break the batch cap
    assert "global batch of 3,072 sequences" in panel.check_design()[1]
    panel.set_values(schedule="gpipe", microbatches=128)  # GPipe keeps every micro-batch's activations
    assert "does not fit" in panel.check_design()[1]
    panel.set_values(schedule="interleaved", chunks=2, microbatches=32, dp=16)
    assert "2,048 GPUs; the task allows at most 1,024" in panel.check_design()[1]
    panel.gpu.value = "H100-SXM"
    assert "GPU is the A100-80GB" in panel.check_design()[1]
    panel.set_values(gpu="A100-80GB", link="nvlink3")  # a faster stage link would shrink the simulated bubble
    assert "stage link is ib-hdr" in panel.check_design()[1]


def test_pipeline_task_met_by_the_solution_found():
    panel = design.TASKS["02"][2]().set_task(design.task("02"))
    panel.set_values(**find_solution("02"))
    met, reason = panel.check_design()
    assert met and "Goal met" in panel.task_result.value
    assert panel.plan.bubble_simulated < 0.10 and panel.plan.fits


def test_tensor_task_names_memory_and_communication():
    panel = design.TASKS["03"][2]().set_task(design.task("03"))
    met, reason = panel.check_design()  # 2d on 16 GPUs: small enough, but SUMMA over InfiniBand is slow
    assert not met and "ms over ib-hdr" in reason and "MB per GPU" not in reason
    panel.set_values(mode="1d", devices=8)  # fast on NVLink, but 1D keeps the block's input whole on every rank
    reason = panel.check_design()[1]
    assert "MB per GPU; the task asks for at most 375 MB" in reason and "ms" not in reason
    panel.set_values(mode="3d", devices=8)
    assert panel.check_design()[0]
    panel.hidden.value = 1024
    assert "hidden h is 12288" in panel.check_design()[1]
    panel.set_values(hidden=12288, mode="2d", devices=8)  # 8 is not a square: the panel shows bad input
    assert "no valid layout" in panel.check_design()[1]


def test_advisor_task_asks_for_the_fewest_gpus_that_meet_the_deadline():
    from labkit.practice.design_topics import run_days

    panel = design.TASKS["09"][2]().set_task(design.task("09"))
    met, reason = panel.check_design()  # the default GPT-3 setting names every field the task fixes
    assert not met and "model is llama2-70b" in reason and "global batch is 1,024" in reason
    found = find_solution("09")
    panel.set_values(**found)
    assert panel.check_design()[0] and "Goal met" in panel.task_result.value
    assert run_days(panel.advice.best.step_s, 1024, 4096) < 30
    panel.set_values(gpus=found["gpus"] // 2)  # half as many: past the deadline
    assert "the task asks for under 30: more GPUs" in panel.check_design()[1]
    panel.set_values(gpus=found["gpus"] * 2)  # twice as many: meets it, but not with the fewest
    assert "the task asks for the fewest" in panel.check_design()[1]
    panel.set_values(gpus=found["gpus"] + 8)
    assert "GPUs a power of two" in panel.check_design()[1]


def test_economics_and_crossbar_tasks_are_the_panels_own():
    from labkit.economics.panel import design_task as economics_task
    from labkit.future.panel import design_task as crossbar_task

    assert design.task("07").goal == economics_task().goal and design.task("08").goal == crossbar_task().goal
    found = find_solution("07")  # many GPUs and a large batch, as the notebook's hint says
    assert found["gpus"] == 512 and found["batch"] == 4096.0
    assert find_solution("08")["reads"] > 1  # one read's noise floor is above 1%


def test_offload_task_needs_a_faster_link_and_a_searched_plan():
    panel = design.TASKS["04"][2]().set_task(design.task("04"))
    met, reason = panel.check_design()  # vDNN over the V100's own PCIe 3: fits, but several times compute
    assert not met and "x compute alone (simulated); the task asks for at most 2.5x" in reason
    panel.set_values(link_gbps=128.0)
    assert "host link of at most 64 GB/s" in panel.check_design()[1]
    panel.set_values(link_gbps=64.0, policy="none")
    assert "out of memory by" in panel.check_design()[1]
    panel.set_values(policy="vdnn-all")  # swapping everything moves too many bytes even at 64 GB/s
    assert not panel.check_design()[0]
    assert find_solution("04") == {"policy": "swapadvisor", "link_gbps": 64.0}
    panel.set_values(policy="swapadvisor")
    assert panel.check_design()[0] and "Goal met" in panel.task_result.value


def test_reduction_task_asks_for_a_fit_with_the_least_extra_compute():
    panel = design.TASKS["05"][2]().set_task(design.task("05"))
    met, reason = panel.check_design()  # no recompute, 32-bit Adam states: 16 B per parameter alone overflow
    assert not met and "does not fit" in reason
    panel.set_values(recompute="full", optimizer_bits=8)  # fits, but rebuilds more than it must
    assert "another combination fits with less" in panel.check_design()[1]
    panel.set_values(seq=2048)
    assert "sequence is 4096" in panel.check_design()[1]
    panel.set_values(seq=4096, **find_solution("05"))
    assert panel.check_design()[0] and "Goal met" in panel.task_result.value
    assert panel.design.extra_compute == panel.best.extra_compute


def test_resilience_task_asks_where_goodput_drops_below_90_percent():
    from labkit.practice.design_storage import RESILIENCE_STEP

    panel = design.TASKS["06"][2]().set_task(design.task("06"))
    met, reason = panel.check_design()  # 16,384 GPUs: still just above 90%
    assert not met and "more GPUs" in reason
    panel.set_values(gpus=131072)
    assert "fewer GPUs" in panel.check_design()[1]
    panel.set_values(storage_gbps=1000.0)
    assert "storage of 100 GB/s" in panel.check_design()[1]
    found = find_solution("06")
    panel.set_values(storage_gbps=100.0, **found)
    assert panel.check_design()[0] and "Goal met" in panel.task_result.value
    assert panel.outcome.goodput < 0.9
    assert panel.evaluate("checkpoint-restart", found["gpus"] - RESILIENCE_STEP, panel._rc_factors()).goodput >= 0.9
