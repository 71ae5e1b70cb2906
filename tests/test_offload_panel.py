"""The offload timeline panel of notebook 04, driven without a browser."""

from __future__ import annotations

import pytest

from labkit.offload.panel import POLICIES, OffloadPanel


def test_panel_draws_the_four_streams_and_reacts_to_the_link():
    panel = OffloadPanel()
    assert panel.result is not None and len(panel.figures) == 1
    assert "iteration" in panel.message.value and "stalls" in panel.message.value
    assert "predicted" in panel.message.value
    ax = panel.figures[0].axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["compute", "d2h", "h2d", "disk"]
    stalls = ax.collections[-1]  # the red shading over the compute lane's idle gaps
    assert len(stalls.get_paths()) > 0 and stalls.get_facecolor()[0][0] > 0.8
    before = panel.result.time_s
    panel.link_gbps.value = panel.link_gbps.value / 4
    assert panel.result.time_s > before


def test_vdnn_fits_where_no_offload_does_not():
    panel = OffloadPanel(policy="none")
    assert "out of memory by" in panel.message.value
    assert not [e for e in panel.result.timeline.events if e.stream != "compute"]
    assert len(panel.figures[0].axes[0].collections[-1].get_paths()) == 0  # no stalls to shade
    assert panel.result.bytes_moved == 0 and "0.0 GB over the host link" in panel.message.value
    panel.policy.value = "vdnn-all"
    assert "fits" in panel.message.value and panel.result.bytes_moved > 0
    assert {e.stream for e in panel.result.timeline.events} == {"compute", "d2h", "h2d"}


def test_swapadvisor_fits_where_vdnn_fits_at_the_defaults():
    panel = OffloadPanel()
    assert "fits" in panel.message.value
    vdnn = panel.result
    panel.policy.value = "swapadvisor"
    assert "fits" in panel.message.value and "out of memory" not in panel.message.value
    assert panel.result.peak_bytes <= panel.machine().capacity_bytes
    assert panel.result.time_s <= vdnn.time_s


def test_disk_policy_uses_the_disk_and_slows_with_it():
    panel = OffloadPanel(policy="vdnn-to-disk")
    assert {e.stream for e in panel.result.timeline.events} == {"compute", "disk"}
    before = panel.result.time_s
    panel.disk_gbps.value = 1.0
    assert panel.result.time_s > before


def test_every_policy_draws():
    panel = OffloadPanel(micro_batch=1, seq=512)
    for policy in POLICIES:
        panel.policy.value = policy
        assert panel.result is not None and panel.figures, policy


@pytest.mark.parametrize("control, value, message", [
    ("link_gbps", 0.0, "host link GB/s must be a positive number"),
    ("disk_gbps", -1.0, "disk GB/s must be a positive number"),
    ("budget_gb", 0.0, "budget GB must be a positive number"),
    ("budget_gb", 100.0, "budget GB must be at most the memory of the V100-32GB, 34.1 GB (32 GiB)"),
    ("seq", 0, "sequence must be a positive integer"),
    ("micro_batch", -2, "micro-batch must be a positive integer"),
])  # fmt: skip
def test_panel_shows_bad_input(control, value, message):
    panel = OffloadPanel()
    getattr(panel, control).value = value
    assert panel.result is None and not panel.figures
    assert "bad input" in panel.message.value and message in panel.message.value


def test_unknown_values_name_the_field():
    with pytest.raises(Exception, match="policy must be one of"):
        OffloadPanel(policy="magic")
    with pytest.raises(Exception, match="model must be one of"):
        OffloadPanel(model="gpt5")


def test_design_task_has_an_answer():
    """Notebook 04's task: the slowest host link at which vDNN costs under 10% exists on the panel."""
    panel = OffloadPanel()
    costs = {}
    for gbps in (32.0, 256.0, 1024.0, 4096.0):
        panel.link_gbps.value = gbps
        busy = panel.result.timeline.events
        compute = sum(e.end - e.start for e in busy if e.stream == "compute")
        costs[gbps] = panel.result.time_s / compute - 1
    assert costs[32.0] > 0.1 and min(costs.values()) < 0.1
    assert list(costs.values()) == sorted(costs.values(), reverse=True)  # a faster link never costs more
