"""The fault-tolerance design panel of notebook 06, driven without a browser."""

from __future__ import annotations

import html
import math

import pytest

from labkit.errors import LabkitError
from labkit.references import failure_traces
from labkit.resilience.interval import cluster_mtbf_s, daly_interval, goodput_daly
from labkit.resilience.panel import STRATEGIES, ResiliencePanel
from labkit.resilience.redundancy import failover_step, goodput_redundant, rc_step

LLAMA3 = next(t for t in failure_traces() if t.name == "Llama 3")


def test_defaults_are_checkpoint_restart_on_llama3s_cluster_by_the_formulas():
    panel = ResiliencePanel()
    out, mtbf = panel.outcome, cluster_mtbf_s(LLAMA3.rate_per_gpu_day, 16384)
    assert out is not None and len(panel.figures) == 1
    c = 980e9 / 100e9  # 70B parameters x 14 B over 100 GB/s
    assert out.checkpoint_s == pytest.approx(c) and out.restart_s == pytest.approx(600 + c)
    assert out.interval_s == pytest.approx(daly_interval(c, mtbf))
    assert out.goodput == pytest.approx(goodput_daly(daly_interval(c, mtbf), c, 600 + c, mtbf))
    assert out.lost_gpu_hours_per_day == pytest.approx((1 - out.goodput) * 16384 * 24)
    text = panel.message.value
    for piece in ("goodput 90.8%", "GPU-hours lost per day", "(Daly)", "7.8 failures per day", "predicted"):
        assert piece in text
    assert panel.figures[0].axes[0].get_xlabel().startswith("checkpoint interval")


def test_peer_memory_beats_storage_and_rc_matches_its_model():
    panel = ResiliencePanel()
    storage = panel.outcome
    panel.strategy.value = "in-memory peer"
    peer = panel.outcome
    assert peer.checkpoint_s == pytest.approx(980e9 / (128 * 50e9))  # one model-parallel group writes, as section 7
    panel.writers.value = 10**6  # never more writers than GPUs
    assert panel.outcome.checkpoint_s == pytest.approx(980e9 / (16384 * 50e9))
    panel.writers.value = 128
    assert peer.interval_s < storage.interval_s and peer.goodput > storage.goodput
    panel.strategy.value = "redundant computation"
    rc = panel.outcome
    step = rc_step("1f1b", 8, 16)
    slowdown = failover_step("1f1b", 8, 16).makespan / step.plain_s
    expected = goodput_redundant(step.overhead, slowdown, 60.0, 3600.0, LLAMA3.rate_per_gpu_day, 16384)
    assert rc.interval_s is None and rc.goodput == pytest.approx(expected.goodput)
    assert "no checkpoint" in panel.message.value and "failover slowdown" in panel.message.value
    panel.replace_min.value = 5.0  # a spare node in 5 minutes: RC now beats restarting from storage
    assert panel.outcome.goodput > storage.goodput


def test_preset_sets_the_rate_and_a_typed_rate_is_custom():
    panel = ResiliencePanel()
    before = panel.outcome.goodput
    panel.preset.value = "OPT-175B"
    opt = next(t for t in failure_traces() if t.name == "OPT-175B")
    assert panel.rate.value == opt.rate_per_gpu_day and panel.outcome.goodput < before  # OPT failed more often
    panel.rate.value = 1e-4
    assert panel.preset.value == "custom" and panel.outcome.goodput > before


def test_cluster_size_plot_falls_with_size_and_drops_rc_where_its_model_fails():
    panel = ResiliencePanel(plot="cluster size")
    ax = panel.figures[0].axes[0]
    assert ax.get_xlabel().startswith("GPUs") and len(ax.get_lines()) == 3 + 1  # three strategies, a marker
    storage = ax.get_lines()[0].get_ydata()
    assert all(a >= b for a, b in zip(storage, storage[1:], strict=False))
    rc = ax.get_lines()[2].get_ydata()
    assert math.isnan(rc[-1]) and not math.isnan(rc[0])  # at 131k GPUs failures outpace 1-hour replacements


@pytest.mark.parametrize("control, value, message", [
    ("gpus", 0, "GPUs must be a positive integer"),
    ("rate", -1.0, "failures/GPU-day must be a positive number"),
    ("checkpoint_gb", 0.0, "checkpoint GB must be a positive number"),
    ("storage_gbps", 0.0, "storage GB/s must be a positive number"),
    ("network_gbps", -5.0, "net GB/s/GPU must be a positive number"),
    ("restart_s", -1.0, "restart s must be a non-negative number"),
    ("stages", 1, "RC: stages must be >= 2"),
    ("microbatches", 4, "RC: micro-batches >= stages"),
    ("failover_s", -1.0, "RC: failover s must be a non-negative number"),
    ("replace_min", float("nan"), "RC: replace min must be a non-negative number"),
])  # fmt: skip
def test_bad_input_shows_a_message_not_a_traceback(control, value, message):
    panel = ResiliencePanel()
    getattr(panel, control).value = value
    assert panel.outcome is None and not panel.figures
    assert "bad input" in panel.message.value and message in html.unescape(panel.message.value)


def test_rc_refuses_failures_faster_than_replacements():
    panel = ResiliencePanel(strategy="redundant computation", preset="custom", rate_per_gpu_day=0.05)
    assert panel.outcome is None and "must be shorter than the MTBF" in panel.message.value
    panel.strategy.value = "checkpoint-restart"  # the other strategies still have an answer
    assert panel.outcome is not None and len(panel.figures[0].axes[0].get_lines()) == 2 + 2


def test_every_strategy_and_plot_draws():
    panel = ResiliencePanel(gpus=1024)
    for strategy in STRATEGIES:
        for plot in ("interval", "cluster size"):
            panel.strategy.value, panel.plot.value = strategy, plot
            assert panel.outcome is not None and panel.figures, (strategy, plot)


def test_unknown_choices_name_the_field():
    with pytest.raises(LabkitError, match="strategy must be one of"):
        ResiliencePanel(strategy="pray")
    with pytest.raises(LabkitError, match="preset must be one of custom, Llama 3, OPT-175B"):
        ResiliencePanel(preset="GPT-5")
