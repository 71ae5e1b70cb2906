"""The codec speed table: an untimed warm-up, the fastest of a few runs in CPU seconds, and its trends (issue 40).

Before: one wall-clock call per stream, so notebook 05's first row (the codec's first call) read 56 MB/s beside
500-800 for every other. Cost: well under a second (scripted clocks, one 256 KB stream).
"""

from __future__ import annotations

import os

import pytest

from labkit.reduction import codecs
from labkit.reduction.compress import CompressionRow, speed_trends


def test_the_first_call_is_untimed_and_the_fastest_run_is_kept(monkeypatch):
    calls, clock = [], iter([0.0, 0.5, 1.0, 1.1, 2.0, 2.3])  # timed runs of 0.5, 0.1 and 0.3 CPU seconds
    real = codecs.compress
    monkeypatch.setattr(codecs, "compress", lambda data, codec="zstd-3": calls.append(len(data)) or real(data, codec))
    monkeypatch.setattr(codecs.time, "thread_time", lambda: next(clock))
    monkeypatch.setattr(codecs, "SPEED_BUDGET_S", 10.0)
    data = os.urandom(1 << 18)
    result = codecs.measure(data, "zstd-3")
    assert calls == [codecs.WARM_BYTES, 1 << 18, 1 << 18, 1 << 18]  # the warm-up first, never timed
    assert result.mb_per_s == pytest.approx(len(data) / 1e6 / 0.1) and result.round_trip


def test_a_slow_codec_stops_at_its_budget(monkeypatch):
    clock = iter([0.0, 0.2, 9.0, 9.0])
    monkeypatch.setattr(codecs.time, "thread_time", lambda: next(clock))
    assert codecs.measure(b"x" * 1000, "zstd-19").mb_per_s == pytest.approx(1000 / 1e6 / 0.2)  # one timed run


def _row(kind: str, speeds: tuple[float, float, float]) -> CompressionRow:
    return CompressionRow(kind, "fp32", 1000, 7.9, 1.01, 1.0, 1.0, 1.0, None, None, speeds)


def test_speed_trends_read_the_table():
    good = [_row("weights", (700, 6, 3000)), _row("gradients", (800, 5, 4000)), _row("text", (300, 2, 600))]
    assert all(speed_trends(good).values()) and len(speed_trends(good)) == 2
    cold = [_row("weights", (56, 6, 3000)), *good[1:], _row("adam m", (750, 5, 3500))]  # issue 40's first row
    assert speed_trends(cold) == {"lz4 > zstd-3 > zstd-19 on every stream": True,
                                  "no row's zstd-3 below a tenth of the median row's": False}
    assert not speed_trends([_row("weights", (700, 800, 3000))])["lz4 > zstd-3 > zstd-19 on every stream"]
