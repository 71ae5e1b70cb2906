"""Notebook 03's scaling claims (labkit.intra_layer.trends) on report.winner_cells: they hold on the notebook's
tables, the text table is built from the same cells, and each claim fails when its figure turns. Cost: well under
a second (predicted figures only).
"""

from __future__ import annotations

from dataclasses import replace

from labkit import hardware
from labkit.intra_layer import report, trends

A100, IB, NVLINK = hardware.gpu("A100-80GB"), hardware.link("ib-hdr"), hardware.link("nvlink3")


def test_the_gpt3_block_claims_hold_and_each_can_fail():
    cells = report.winner_cells([2, 4, 8, 16, 64], [NVLINK, IB], 2048, 12288, 4 * 12288, A100, IB)
    held = trends.gpt3_block(cells, A100.nvlink_domain_gpus, NVLINK.name, IB.name)
    assert all(held.values()), held
    slow_inside = [replace(c, comm_s=c.compute_s) if c.devices == 8 and c.link == NVLINK.name else c for c in cells]
    assert not trends.gpt3_block(slow_inside, 8, NVLINK.name, IB.name)[
        "inside the NVLink domain communication is a small share of compute"]
    grid = [replace(cells[0], mode="2d"), *cells[1:]]
    assert not trends.gpt3_block(grid, 8, NVLINK.name, IB.name)["1D wins every cell"]
    table = report.winners([2, 4, 8, 16, 64], [NVLINK, IB], 2048, 12288, 4 * 12288, A100, IB)
    assert "1d (P=16) on ib-hdr" in table and all(f"{c.label}" in table for c in cells)


def test_many_tokens_make_a_grid_mode_win():
    cells = report.winner_cells([8, 16, 64], [NVLINK, IB], 65536, 1024, 4 * 1024, A100, IB)
    assert trends.grid_modes_win(cells) == {"a grid mode wins every cell": True}
    assert not trends.grid_modes_win([replace(cells[0], mode="1d"), *cells[1:]])["a grid mode wins every cell"]
    assert not trends.grid_modes_win([])["a grid mode wins every cell"]
