"""The save-cost table: bandwidths measured with plain tools, predictions that are bytes over them."""

from __future__ import annotations

import pytest

from labkit.errors import LabkitError
from labkit.resilience.corrupt import CorruptionCase
from labkit.resilience.save_cost import Bandwidths, measure_bandwidths, save_cost_text, save_costs


def test_predictions_are_bytes_over_the_measured_bandwidths(tmp_path) -> None:
    bw = Bandwidths(write_fsync=100e6, sha256=500e6, copy=1e9, probe_bytes=1 << 20)
    got, rows = save_costs(tmp_path, d_models=(32, 64), repeats=1, bandwidths=bw)
    assert got is bw and [r.state_bytes for r in rows] == sorted(r.state_bytes for r in rows)
    for r in rows:
        assert r.predicted_sync_s == pytest.approx(r.state_bytes / 100e6 + r.state_bytes / 500e6)
        assert r.predicted_async_stall_s == pytest.approx(r.state_bytes / 1e9)
        assert r.disk_bytes > r.state_bytes > 0 and r.sync_s > 0 and r.async_total_s >= r.async_stall_s > 0
    text = save_cost_text(bw, rows)
    assert "write + fsync 100" in text and "B/copy ms" in text


def test_bandwidth_probe_leaves_nothing_behind(tmp_path) -> None:
    bw = measure_bandwidths(tmp_path, 1 << 20)
    assert min(bw.write_fsync, bw.sha256, bw.copy) > 0 and not list(tmp_path.iterdir())
    with pytest.raises(LabkitError, match="probe_bytes"):
        measure_bandwidths(tmp_path, 0)


def test_corruption_reasons_are_wrapped_not_cut() -> None:
    reason = "; ".join(f"parameter p{i}: checkpoint shape (35, 64), model shape (35, 32)" for i in range(5))
    lines = CorruptionCase("wrong model shape", 4, True, reason, 2).reason_lines(width=60)
    assert all(len(line) <= 60 for line in lines)
    joined = " ".join(lines)
    assert joined.endswith("and 3 more") and "p1: checkpoint shape (35, 64), model shape (35, 32)" in joined
    assert CorruptionCase("x", 1, True, "short", 0).reason_lines() == ["short"]
