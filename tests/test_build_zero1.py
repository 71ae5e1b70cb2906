"""02.build.zero1 on real ranks: the reference passes, the stub is "not written yet", each wrong one is named."""

from __future__ import annotations

from pathlib import Path

import pytest

from labkit.practice import build
from labkit.practice.build import zero1

ROOT = Path(__file__).resolve().parent.parent
WRONG = ROOT / "tests" / "build_wrong"


def test_reference_passes_every_case():
    fb = build.check_build(zero1.KEY, ROOT / "instructor" / "build" / "zero1.py")
    assert fb.ok, str(fb)
    assert "bit-identical to torch's DDP + AdamW" in str(fb) and "traffic per step is 2 Psi" in str(fb)


def test_blank_stub_is_not_written_yet(tmp_path):
    path = build.open_stub(zero1.KEY, tmp_path)
    assert path == tmp_path / "build" / "zero1.py"
    fb = build.check_build(zero1.KEY, path)
    assert not fb.ok and str(fb).startswith("Not written yet")
    path.write_text(path.read_text() + "\n# my notes\n")
    assert build.open_stub(zero1.KEY, tmp_path).read_text().endswith("# my notes\n")  # never overwritten


@pytest.mark.parametrize(("bug", "named"), [
    ("sum_not_mean", "missing average after the reduce"),
    ("reduced_twice", "gradients reduced twice"),
    ("no_sharding", "full optimizer states on every rank"),
    ("no_allgather", "missing all-gather"),
])
def test_each_wrong_implementation_fails_with_its_name(bug, named):
    fb = build.check_build(zero1.KEY, WRONG / f"zero1__{bug}.py")
    assert not fb.ok
    assert named in str(fb), str(fb)
    others = {"sum_not_mean": "missing average", "reduced_twice": "reduced twice", "no_sharding": "no sharding",
              "no_allgather": "missing all-gather"}
    assert not [n for b, n in others.items() if b != bug and n in str(fb)], str(fb)  # only its own name
