"""The tensor-parallel design panel and the 'which mode wins' table, without a browser."""

from __future__ import annotations

import pytest

from labkit import hardware
from labkit.intra_layer import costs
from labkit.intra_layer.panel import TensorParallelPanel
from labkit.intra_layer.report import winners


def test_panel_shows_the_mode_and_reacts():
    panel = TensorParallelPanel(mode="2d", devices=16, hidden=1024, batch=512)
    assert panel.cost is not None and "2d (q=4)" in panel.message.value and len(panel.figures) == 1
    slow = panel.cost.seconds(hardware.link("nvlink3"))
    panel.link.value = "pcie4-x16"
    assert panel.cost.seconds(hardware.link("pcie4-x16")) > slow
    assert "over pcie4-x16" in panel.message.value


@pytest.mark.parametrize("control, value, message", [
    ("devices", 8, "world_size must be a square number for mode 2d"),
    ("hidden", 1001, "must be a multiple of"),
    ("devices", 0, "world_size"),
])  # fmt: skip
def test_panel_shows_bad_input(control, value, message):
    panel = TensorParallelPanel(mode="2d", devices=16, hidden=1024, batch=512)
    getattr(panel, control).value = value
    assert panel.cost is None and not panel.figures
    assert "bad input" in panel.message.value and message in panel.message.value


def test_winners_table_lists_the_fastest_mode_per_link():
    links = [hardware.link("nvlink3"), hardware.link("ib-hdr")]
    table = winners([4, 8], links, 512, 1024, 4096, hardware.gpu("A100-80GB"))
    best = costs.rank_modes(8, links[1], 512, 1024, 4096)[0]
    assert f"{best.label}: {1e3 * best.seconds:.2f} ms" in table
    assert "comm. over nvlink3" in table.splitlines()[0]


def test_winners_puts_groups_beyond_the_nvlink_domain_on_the_inter_node_link():
    a100, nvl, ib = hardware.gpu("A100-80GB"), hardware.link("nvlink3"), hardware.link("ib-hdr")
    table = winners([8, 16, 64], [nvl], 2048, 12288, 4 * 12288, a100, ib)
    rows = {line.split()[0]: line for line in table.splitlines()[2:]}
    assert "on ib-hdr" not in rows["8"] and "on ib-hdr" in rows["16"] and "on ib-hdr" in rows["64"]
    best16 = costs.rank_modes(16, ib, 2048, 12288, 4 * 12288)[0]
    assert f"{1e3 * best16.seconds:.2f} ms" in rows["16"]


def test_panel_says_when_the_group_leaves_the_nvlink_domain():
    panel = TensorParallelPanel(mode="2d", devices=16, hidden=1024, batch=512, link="nvlink3")
    assert "crosses ib-hdr" in panel.message.value and "over ib-hdr" in panel.message.value
    panel.devices.value = 4
    assert "crosses" not in panel.message.value and "over nvlink3" in panel.message.value
