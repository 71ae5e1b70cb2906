"""Notebook 06's coding exercise: a checkpoint writer that survives a SIGKILL in the middle of a write.

The learner writes ``save(state, path)``. Each case writes a good checkpoint first, then
forks a child that saves a newer, large state to the same path and kills it with a real
SIGKILL as soon as bytes start reaching the disk. After the kill, ``path`` must load
(``torch.load(..., weights_only=True)``) and hold one complete checkpoint, the old or the
new one, never a torn mix. ``torch.save(state, path)`` straight onto the path fails; writing
a temporary file, flushing it to disk and renaming it over the path (an atomic replace on
POSIX) passes. The child is forked, not spawned, so a function defined in the notebook
works; it does file I/O only.
"""

from __future__ import annotations

import os
import signal
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from labkit.practice.coding import Case, CodingExercise, attempt, register

BIG = 48 * 2**20  # bytes of the newer state: enough that a write takes many milliseconds
KILL_AFTER_BYTES = (1, 8 * 2**20)


def _states():
    import torch

    old = {"step": torch.tensor(1), "w": torch.zeros(1024)}
    new = {"step": torch.tensor(2), "w": torch.ones(BIG // 4)}
    return old, new


def _folder_bytes(folder: Path) -> int:
    total = 0
    for f in folder.iterdir():
        try:
            total += f.stat().st_size
        except FileNotFoundError:  # renamed away between the listing and the stat
            pass
    return total


def _kill_mid_write(fn: Callable, new: dict, path: Path, after_bytes: int, timeout: float = 20.0) -> str:
    """Fork a child that runs fn(new, path); SIGKILL it once ``after_bytes`` have reached any file in the folder."""
    pid = os.fork()
    if pid == 0:  # the child: save, then leave without running the parent's cleanup
        try:
            fn(new, path)
        finally:
            os._exit(0)
    deadline, before = time.monotonic() + timeout, _folder_bytes(path.parent)
    try:
        while time.monotonic() < deadline:
            if _folder_bytes(path.parent) - before >= after_bytes:
                break
            done, _ = os.waitpid(pid, os.WNOHANG)
            if done:
                return "finished before the kill"
            time.sleep(0.0005)
        os.kill(pid, signal.SIGKILL)
    finally:
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass
    return "killed"


def run(fn: Callable[[dict, str | Path], None]) -> list[Case]:
    import torch

    old, new = _states()
    cases = []
    for after in KILL_AFTER_BYTES:
        name = f"SIGKILL after {after:,} B of the new checkpoint reached the disk"
        with tempfile.TemporaryDirectory(prefix="labkit-ckpt-") as d:
            path = Path(d) / "ckpt.pt"
            _, failed = attempt(name, lambda path=path: fn(old, path), what="saving raised")
            if failed:
                cases.append(failed)
                continue
            how = _kill_mid_write(fn, new, path, after)
            try:
                got = torch.load(path, weights_only=True)
                step = int(got["step"])
                whole = torch.equal(got["w"], (old if step == 1 else new)["w"])
                ok, detail = whole, "" if whole else f"step {step} loaded with the wrong weights (torn)"
            except Exception as err:  # noqa: BLE001 - a torn file fails to load in many ways
                ok, detail = False, f"after the kill ({how}) the checkpoint does not load: {type(err).__name__}"
        cases.append(Case(name, ok, detail))
    return cases


register(CodingExercise(
    "06.code.atomic_save",
    "Write save(state, path): store the dict of tensors so that a SIGKILL at any moment leaves path loadable "
    "with torch.load(path, weights_only=True), holding the old checkpoint or the new one.",
    run,
    "Never write onto the live file: write a temporary file next to it, flush and os.fsync it, then os.replace it "
    "over path (a rename is atomic on POSIX).",
))
