"""03.build.tp_layers on real gloo ranks: the reference passes, the stub is "not written yet", each wrong one named."""

from __future__ import annotations

from pathlib import Path

import pytest

from labkit.practice import build
from labkit.practice.build import tp_layers

ROOT = Path(__file__).resolve().parent.parent
WRONG = ROOT / "tests" / "build_wrong"
REFERENCE = ROOT / "instructor" / "build" / "tp_layers.py"
NAMES = {"no_backward_allreduce": "f's backward does not all-reduce",
         "allreduce_both": "reduced in both directions",
         "no_contiguous": "missing .contiguous()",
         "wrong_dim": "split the wrong dimension"}


def test_reference_passes_every_case():
    fb = build.check_build(tp_layers.KEY, REFERENCE)
    assert fb.ok, str(fb)
    assert "All 11 tests pass" in str(fb) and "MLP on 2 ranks: input gradient equals the dense one" in str(fb)


def test_reference_passes_on_four_ranks():
    cases = tp_layers.run(REFERENCE, worlds=(4,))
    assert cases and all(c.ok for c in cases), [c for c in cases if not c.ok]


def test_blank_stub_is_not_written_yet(tmp_path):
    path = build.open_stub(tp_layers.KEY, tmp_path)
    assert path == tmp_path / "build" / "tp_layers.py"
    fb = build.check_build(tp_layers.KEY, path)
    assert not fb.ok and str(fb).startswith("Not written yet")


@pytest.mark.parametrize("bug", sorted(NAMES))
def test_each_wrong_implementation_fails_with_its_name(bug):
    fb = build.check_build(tp_layers.KEY, WRONG / f"tp_layers__{bug}.py")
    assert not fb.ok
    assert NAMES[bug] in str(fb), str(fb)
    assert not [n for b, n in NAMES.items() if b != bug and n in str(fb)], str(fb)  # only its own name
    assert "Hint 1:" in str(fb)


def test_benchmark_bytes_match_the_prediction_for_both_engines():
    rows = tp_layers.benchmark(REFERENCE, steps=2)
    assert [r["engine"] for r in rows] == ["yours", "torch DTensor"], rows
    for r in rows:
        assert r["bytes all-reduced"] == r["predicted bytes"] == 2 * tp_layers.TOKENS * tp_layers.H * 4, rows
        assert r["seconds per step"] > 0
