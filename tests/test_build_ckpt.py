"""06.build.sharded_ckpt on real gloo ranks and real SIGKILLs: the reference passes, the stub is "not written yet",
each wrong implementation fails with its own name."""

from __future__ import annotations

from pathlib import Path

import pytest

from labkit.practice import build
from labkit.practice.build import sharded_ckpt

ROOT = Path(__file__).resolve().parent.parent
WRONG = ROOT / "tests" / "build_wrong"
REFERENCE = ROOT / "instructor" / "build" / "sharded_ckpt.py"
NAMES = {"no_fsync": "rename without fsync",
         "manifest_first": "manifest written before the shards",
         "no_barrier": "no barrier between the shard writes and the manifest",
         "weights_only_false": "weights_only=False ran code"}


def test_reference_passes_every_case_including_the_kills():
    fb = build.check_build(sharded_ckpt.KEY, REFERENCE)
    assert fb.ok, str(fb)
    assert "All 8 tests pass" in str(fb)
    assert "SIGKILL of rank 1 half-way through its shard" in str(fb) and "SIGKILL of rank 0" in str(fb)


def test_blank_stub_is_not_written_yet(tmp_path):
    path = build.open_stub(sharded_ckpt.KEY, tmp_path)
    fb = build.check_build(sharded_ckpt.KEY, path)
    assert not fb.ok and str(fb).startswith("Not written yet")


@pytest.mark.parametrize("bug", sorted(NAMES))
def test_each_wrong_implementation_fails_with_its_name(bug):
    kills = ((1, 1.0),) if bug in ("no_fsync", "weights_only_false") else sharded_ckpt.KILLS  # kills cannot see them
    cases = sharded_ckpt.run(WRONG / f"sharded_ckpt__{bug}.py", kills=kills)
    text = "\n".join(f"{c.ok} {c.name}" + ("" if c.ok else f": {c.detail}") for c in cases)
    assert not all(c.ok for c in cases), text
    assert NAMES[bug] in text, text
    assert not [n for b, n in NAMES.items() if b != bug and n in text], text  # only its own name


def test_the_kills_catch_an_uncoordinated_commit_on_their_own():
    cases = sharded_ckpt.run(WRONG / "sharded_ckpt__no_barrier.py", kills=((1, 1.0),))
    killed = [c for c in cases if c.name.startswith("SIGKILL")]
    assert killed and not killed[0].ok and "does not load" in killed[0].detail
