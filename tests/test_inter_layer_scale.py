"""Inter-layer parallelism at scale: stage times, simulated plans and the design panel."""

from __future__ import annotations

import pytest

from labkit import hardware
from labkit.inter_layer.panel import PipelinePanel
from labkit.inter_layer.scale import plan, stage_times, zero_step_seconds
from labkit.predict import compute
from labkit.predict.estimate import TrainingSetup, forward_flops
from labkit.shapes import model_shape

GPT3 = model_shape("gpt3-175b")
A100 = hardware.gpu("A100-80GB")


def test_stage_time_is_the_advisors_kernel_model_without_the_bubble():
    setup = TrainingSetup(GPT3, micro_batch=1, seq=2048, tp=8, pp=16, sp=True, recompute="full",
                          attention="explicit")
    t = stage_times(setup, A100, hardware.link("ib-hdr"))
    k = compute.stage_seconds(GPT3, 2048, 1, 8, 16, A100, "bf16", True, False, "full")
    assert (t.t_fwd, t.t_bwd) == (k["forward"], k["backward"] + k["recompute"])
    peak = forward_flops(GPT3, 2048, 1) / 128 / A100.peak_flops["bf16"]
    assert peak < t.t_fwd < peak / 0.5  # kernels near their roofline, not Megatron's end-to-end half of peak
    assert t.activation_bytes_sent == 2 * 2048 * 12288 / 8  # split over tp by sequence parallelism
    assert t.t_comm == pytest.approx(hardware.transfer_time(2 * 2048 * 12288 / 8, hardware.link("ib-hdr")))


@pytest.mark.parametrize("schedule, v", [("gpipe", 1), ("1f1b", 1), ("interleaved", 2)])
def test_without_link_time_the_simulated_bubble_is_the_formula(schedule, v):
    setup = TrainingSetup(GPT3, micro_batch=1, seq=2048, tp=8, pp=8, dp=2, microbatches=16, schedule=schedule,
                          chunks=v)
    p = plan(setup, A100, None, hardware.link("ib-hdr"))
    assert p.bubble_simulated == pytest.approx(p.bubble_formula, abs=1e-12)
    ideal = 16 * (p.times.t_fwd + p.times.t_bwd)
    assert p.timeline.makespan == pytest.approx(ideal / (1 - p.bubble_formula))
    assert p.step_seconds > p.timeline.makespan


def test_zero_traffic_is_a_ring_of_2_or_3_psi():
    link = hardware.link("ib-hdr")
    assert zero_step_seconds(1e9, 1, 3, link) == 0.0
    two = zero_step_seconds(1e9, 8, 2, link)
    assert two == pytest.approx(14 * link.latency_s + 2 * 7 / 8 * 2e9 / (link.bandwidth * 0.848))
    assert zero_step_seconds(1e9, 8, 3, link) == pytest.approx(1.5 * two)


def test_panel_draws_and_reacts():
    panel = PipelinePanel(pp=8, microbatches=8, dp=2)
    assert panel.plan is not None and len(panel.figures) == 2 and "bubble" in panel.message.value
    before = panel.plan.bubble_simulated
    panel.microbatches.value = 64
    assert panel.plan.bubble_simulated < before
    panel.schedule.value = "gpipe"
    assert "does not fit" in panel.message.value  # GPipe holds all 64 micro-batches of activations


@pytest.mark.parametrize("control, value, message", [
    ("pp", 5, "pp must divide layers=96"),
    ("chunks", 2, "chunks must be 1 for the 1f1b schedule"),
    ("tp", 7, "tp must divide heads=96"),
    ("dp", 0, "dp must be a positive integer"),
    ("microbatches", 100_000, "microbatches times pp times chunks must be at most"),
])  # fmt: skip
def test_panel_shows_bad_input(control, value, message):
    panel = PipelinePanel(pp=8, microbatches=8, dp=2)
    getattr(panel, control).value = value
    assert panel.plan is None and not panel.figures
    assert "bad input" in panel.message.value and message in panel.message.value
