"""04.build.act_offload in one process: the reference passes, the stub is "not written yet", each wrong one named."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from labkit.practice import build
from labkit.practice.build import act_offload

ROOT = Path(__file__).resolve().parent.parent
WRONG = ROOT / "tests" / "build_wrong"
REFERENCE = ROOT / "instructor" / "build" / "act_offload.py"
NAMES = {"params_too": "parameters offloaded too",
         "kept_in_memory": "kept in memory as well as written",
         "dtype_lost": "the dtype was lost",
         "leaks_files": "leaking files"}


def test_reference_passes_every_case():
    fb = build.check_build(act_offload.KEY, REFERENCE)
    assert fb.ok, str(fb)
    assert "All 6 tests pass" in str(fb) and "40,960 B" in str(fb) and "20,480 B" in str(fb)


def test_prediction_is_the_saved_activations_by_hand():
    b, w, h = act_offload.BATCH, act_offload.WIDTH, act_offload.HIDDEN
    # fc1 keeps its input (the batch), GELU its input, fc2 its input; no weight: they are parameters
    assert act_offload.predicted_bytes(torch.float32) == 4 * (b * w + b * h + b * h)
    assert act_offload.predicted_bytes(torch.bfloat16) == 2 * (b * w + b * h + b * h)


def test_blank_stub_is_not_written_yet(tmp_path):
    path = build.open_stub(act_offload.KEY, tmp_path)
    fb = build.check_build(act_offload.KEY, path)
    assert not fb.ok and str(fb).startswith("Not written yet")
    path.write_text(path.read_text() + "\nX = 1\n")  # edited but still raising: run, and still "not written yet"
    fb = build.check_build(act_offload.KEY, path)
    assert not fb.ok and str(fb).startswith("Not written yet"), str(fb)


@pytest.mark.parametrize("bug", sorted(NAMES))
def test_each_wrong_implementation_fails_with_its_name(bug):
    fb = build.check_build(act_offload.KEY, WRONG / f"act_offload__{bug}.py")
    assert not fb.ok
    assert NAMES[bug] in str(fb), str(fb)
    assert not [n for b, n in NAMES.items() if b != bug and n in str(fb)], str(fb)  # only its own name


def test_benchmark_writes_the_predicted_bytes():
    rows = act_offload.benchmark(REFERENCE, steps=2)
    assert [r["run"] for r in rows] == ["no offload", "yours (files)"]
    assert rows[0]["bytes written per step"] == 0
    assert rows[1]["bytes written per step"] == rows[1]["predicted bytes"] == act_offload.predicted_bytes()
