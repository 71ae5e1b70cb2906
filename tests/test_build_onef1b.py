"""02.build.onef1b on real ranks: the reference passes, the stub is "not written yet", each wrong one is named."""

from __future__ import annotations

from pathlib import Path

import pytest

from labkit.practice import build
from labkit.practice.build import onef1b

ROOT = Path(__file__).resolve().parent.parent
WRONG = ROOT / "tests" / "build_wrong"


def test_reference_passes_on_two_and_four_ranks():
    fb = build.check_build(onef1b.KEY, ROOT / "instructor" / "build" / "onef1b.py")
    assert fb.ok, str(fb)
    assert "p=4: rank 0 holds at most p = 4 micro-batches" in str(fb)


def test_blank_stub_is_not_written_yet(tmp_path):
    fb = build.check_build(onef1b.KEY, build.open_stub(onef1b.KEY, tmp_path))
    assert not fb.ok and str(fb).startswith("Not written yet")


@pytest.mark.parametrize(("bug", "named"), [
    ("deadlock", "deadlock: rank 0 in send"),
    ("gpipe", "GPipe order (all forwards first)"),
    ("no_accumulation", "gradients not accumulated over micro-batches"),
])
def test_each_wrong_implementation_fails_with_its_name(bug, named):
    fb = build.check_build(onef1b.KEY, WRONG / f"onef1b__{bug}.py")
    assert not fb.ok
    assert named in str(fb), str(fb)
