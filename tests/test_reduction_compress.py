"""Compression of the run's own tensors: dense data barely compresses, text and zeros do, and the bound predicts it."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from labkit.errors import LabkitError
from labkit.reduction.codecs import CODECS, compress, decompress, entropy_bits, entropy_bound, measure
from labkit.reduction.compress import (
    CompressConfig,
    CompressionRow,
    compression_table,
    ratio_text,
    run_tensors,
    samples,
)
from labkit.reduction.corpora import STDLIB_TEXTS, stdlib_dir, stdlib_text
from labkit.reduction.planes import SPLITS, join_planes, plane_stats, split_planes, to_bytes

DENSE = ("weights", "gradients", "adam m", "adam v")
REAL_TEXT = tuple(f"text: {name}" for name in STDLIB_TEXTS)
SYNTHETIC = "text: synthetic (lab)"


@pytest.fixture(scope="module")
def data() -> dict[tuple[str, str], bytes]:
    return samples()


@pytest.fixture(scope="module")
def rows(data) -> dict[tuple[str, str], CompressionRow]:
    return {(r.kind, r.dtype): r for r in compression_table(data)}


def test_samples_are_the_run_tensors_in_both_dtypes(data) -> None:
    tensors = run_tensors()
    for kind, t in tensors.items():
        assert data[kind, "fp32"] == to_bytes(t, "fp32")  # a second run gives the same bytes
        assert len(data[kind, "fp32"]) == 4 * t.numel() and len(data[kind, "bf16"]) == 2 * t.numel()
    assert tensors["weights"].numel() == tensors["gradients"].numel() == tensors["adam v"].numel()
    assert (tensors["adam v"] >= 0).all() and (tensors["post-relu"] >= 0).all()
    assert 0.3 < (tensors["post-relu"] == 0).float().mean() < 0.7  # ReLU of a real pre-activation
    assert 0.3 < (tensors["attention probs"] == 0).float().mean() < 0.7  # the causal mask's zeros
    assert (tensors["weights"] != 0).float().mean() > 0.99
    total = sum(len(b) for b in data.values())
    assert 1e6 < total < 8e6  # a few MB, so the test stays fast
    assert data[SYNTHETIC, "utf-8"].decode("utf-8").count(" the ") > 100
    assert b"def " in data["text: python source", "utf-8"] and b"statement" in data["text: python docs", "utf-8"]
    assert all(len(data[k, "utf-8"]) == CompressConfig().text_bytes for k in REAL_TEXT)


def test_real_text_is_read_from_a_fixed_list_of_stdlib_files() -> None:
    for name, files in STDLIB_TEXTS.items():
        assert all((stdlib_dir() / f).is_file() for f in files)
        first = (stdlib_dir() / files[0]).read_bytes()
        assert stdlib_text(name, 100) == first[:100] and stdlib_text(name, 100) == stdlib_text(name, 100)


def test_dense_model_data_barely_compresses(rows) -> None:
    for kind in DENSE:
        r = rows[kind, "fp32"]
        assert max(r.zstd3, r.zstd19, r.lz4) < 1.2, kind
        assert r.lz4 < 1.05, kind
        assert max(rows[kind, "bf16"].zstd3, rows[kind, "bf16"].zstd19) < 1.5, kind


def test_text_and_zeros_compress(rows) -> None:
    for kind in REAL_TEXT:  # real text: 3-5x
        text = rows[kind, "utf-8"]
        assert 3 < text.zstd3 < text.zstd19 < 6 and text.lz4 > 2
        assert text.split_ratio is None and text.split_bound is None
    synthetic = rows[SYNTHETIC, "utf-8"]  # a small grammar repeats far more than real text
    assert synthetic.zstd19 > 2 * max(rows[k, "utf-8"].zstd19 for k in REAL_TEXT)
    for dtype in ("fp32", "bf16"):
        relu, dense = rows["post-relu", dtype], rows["weights", dtype]
        assert relu.zstd3 > dense.zstd3 + 0.3 and relu.zstd19 > dense.zstd19 + 0.3
        assert rows["attention probs", dtype].zstd3 > dense.zstd3 + 0.5


def test_entropy_bound_predicts_dense_data_and_text_beats_it(rows) -> None:
    for kind in DENSE:
        r = rows[kind, "fp32"]
        assert r.entropy_bits > 7.0
        assert r.zstd3 == pytest.approx(r.entropy_bound, rel=0.03), kind  # measured beside predicted
    for kind in (*REAL_TEXT, SYNTHETIC):
        text = rows[kind, "utf-8"]
        assert text.entropy_bound < 2.5 and text.zstd3 > 1.5 * text.entropy_bound  # repeated strings, not odds


def test_exponent_plane_holds_the_redundancy(data, rows) -> None:
    for split in SPLITS:
        planes = plane_stats(data["weights", "fp32"], "fp32", split)
        assert len(planes) == 4
        top, mantissa = planes[0], planes[1:]
        assert top.distinct < 64 and top.entropy_bits < 4 and top.ratio > 2
        assert all(p.entropy_bits > 7.9 and p.ratio < 1.02 and top.ratio > p.ratio for p in mantissa)
    exp, man = plane_stats(data["weights", "bf16"], "bf16")
    assert (exp.plane, man.plane) == ("exponent", "man+sign") and exp.ratio > 2 > 1.05 > man.ratio
    v_low = plane_stats(data["adam v", "fp32"], "fp32")[-1]
    assert v_low.distinct == 128  # v >= 0: the rotated-in sign bit is always 0
    for kind in DENSE:
        for dtype in ("fp32", "bf16"):
            r = rows[kind, dtype]
            assert r.split_ratio > r.zstd3 + 0.05 and r.split_bound > r.entropy_bound, (kind, dtype)


def test_entropy_on_constructed_inputs() -> None:
    assert entropy_bits(bytes(1000)) == 0.0 and entropy_bound(b"\x07" * 10) == math.inf
    assert entropy_bits(bytes(range(256)) * 4) == pytest.approx(8.0, abs=1e-12)
    assert entropy_bound(bytes(range(256))) == pytest.approx(1.0)
    assert entropy_bits(b"ab" * 50) == pytest.approx(1.0)
    assert entropy_bits(b"aaab" * 25) == pytest.approx(-(0.75 * math.log2(0.75) + 0.25 * math.log2(0.25)))


def test_round_trips() -> None:
    g = torch.Generator().manual_seed(0)
    t = torch.randn(3001, generator=g) * torch.logspace(-6, 2, 3001)
    t[::7] = 0.0
    t[::11] *= -1
    for dtype in ("fp32", "bf16"):
        raw = to_bytes(t, dtype)
        for split in SPLITS:
            assert join_planes(split_planes(raw, dtype, split), dtype, split) == raw
        for codec in CODECS:
            assert decompress(compress(raw, codec), codec) == raw
            r = measure(raw, codec)
            assert r.round_trip and r.raw_bytes == len(raw) and r.ratio == len(raw) / r.compressed_bytes
    exp = split_planes(to_bytes(torch.tensor([1.0, -2.0, 0.5]), "fp32"), "fp32")["exponent"]
    assert list(exp) == [127, 128, 126]  # the biased exponents of 1, 2 and 0.5, whatever the sign
    assert np.frombuffer(to_bytes(torch.tensor([1.0]), "bf16"), "<u2")[0] == 0x3F80


def test_ratio_table_is_deterministic(rows) -> None:
    text = ratio_text(list(rows.values()))
    assert text.splitlines()[0].split()[:2] == ["data", "dtype"] and len(text.splitlines()) == len(rows) + 2
    assert "MB/s" in ratio_text(list(rows.values()), speed=True)


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda: compress(b"abc", "gzip"), "codec"),
        (lambda: decompress(b"abc", "zstd-9"), "codec"),
        (lambda: entropy_bits(b""), "data"),
        (lambda: compress("text", "lz4"), "data"),
        (lambda: compress(5), "data must be non-empty bytes"),
        (lambda: to_bytes(torch.ones(3), "fp16"), "dtype"),
        (lambda: to_bytes(torch.arange(3), "fp32"), "t must be a floating-point"),
        (lambda: split_planes(b"\x00" * 6, "fp32"), "multiple of 4"),
        (lambda: split_planes(b"\x00" * 8, "fp32", "bits"), "split"),
        (lambda: join_planes({"a": b"\x00"}, "bf16"), "planes"),
        (lambda: plane_stats(b"\x00" * 8, "int8"), "dtype"),
        (lambda: compression_table({}, split="nibbles"), "split"),
        (lambda: CompressConfig(steps=0), "steps"),
        (lambda: CompressConfig(text_bytes=-1), "text_bytes"),
        (lambda: stdlib_text("poetry"), "name must be one of"),
        (lambda: stdlib_text("python docs", 0), "max_bytes"),
    ],
)
def test_bad_input_names_the_field(call, field: str) -> None:
    with pytest.raises(LabkitError, match=field):
        call()
