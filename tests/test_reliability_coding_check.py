"""Notebook 06's coding check fails a save() that never overwrites and one that hangs in the child (issue 24)."""

from __future__ import annotations

import os
import time

import pytest

from labkit.practice import checkpoint as ck


def never_overwrites(state, path):
    """Atomic in its way, but it keeps the first checkpoint for ever: every kill finds a whole file."""
    import torch

    if not os.path.exists(path):
        torch.save(state, path)


PARENT = os.getpid()


def hangs_in_the_child(state, path):
    """Saves in the notebook's process, hangs in the forked child the check kills."""
    import torch

    if os.getpid() != PARENT:
        time.sleep(3600)
    torch.save(state, path)


def atomic(state, path):
    import torch

    tmp = f"{path}.tmp"
    with open(tmp, "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


@pytest.mark.parametrize("save,failing", [(never_overwrites, "a completed save replaces the old checkpoint"),
                                          (hangs_in_the_child, "neither wrote")])
def test_a_save_that_cheats_the_kills_is_not_passed(save, failing):
    t0 = time.monotonic()
    cases = ck.run(save)
    assert not all(c.ok for c in cases)
    assert any(failing in (c.name + c.detail) for c in cases if not c.ok), cases
    assert time.monotonic() - t0 < ck.TIME_LIMIT_S + 30  # the hung child is killed at the time limit


def test_an_atomic_save_passes():
    assert all(c.ok for c in ck.run(atomic))
