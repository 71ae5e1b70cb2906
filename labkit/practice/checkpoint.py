"""Notebook 06's coding exercise: a checkpoint writer that survives a SIGKILL in the middle of a write.

The learner writes ``save(state, path)``. Each case writes a good checkpoint first, then
forks a child that saves a newer, large state to the same path and kills it with a real
SIGKILL as soon as bytes start reaching the disk. After the kill, ``path`` must load
(``torch.load(..., weights_only=True)``) and hold one complete checkpoint, the old or the
new one, never a torn mix. ``torch.save(state, path)`` straight onto the path fails; writing
a temporary file, flushing it to disk and renaming it over the path (an atomic replace on
POSIX) passes. The child is forked, not spawned, so a function defined in the notebook
works; it does file I/O only, and one that neither writes nor finishes within ``TIME_LIMIT_S``
fails as hung.

A SIGKILL cannot show why ``os.fsync`` matters: the kernel keeps the killed process's written
pages and writes them out later. Only a power cut or an OS crash loses them, and then a rename
that reached the disk before the data leaves an empty or torn file under the live name. So
one case spies on ``os.fsync``/``os.fdatasync`` and ``os.replace``/``os.rename`` during a save
and asks for a flush to disk before the rename; another asks that a completed save really
replaces the old checkpoint (a save that never overwrites would pass every kill).
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
TIME_LIMIT_S = 10.0
FSYNC_CASE = ("the new file is flushed to disk (os.fsync) before it replaces the old one (a SIGKILL cannot test "
              "this: only a power cut or an OS crash loses pages not yet written out)")


TORN = ("While the new bytes are being written, what is under path? A kill at that moment leaves exactly that.",
        "Write the new checkpoint somewhere else in the same folder first, then put it under path in one step that "
        "cannot be half done.")
REPLACES = ("After a completed save, is the new checkpoint under path itself?",
            "A rename can replace a file that exists (os.replace): the new file must end up under path.")
FSYNC = ("Which call makes sure the new file's bytes are on the disk, not only in the kernel's page cache, before the "
         "name points at them?",
         "Flush the file and call os.fsync on its descriptor before the rename.")


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


def _kill_mid_write(fn: Callable, new: dict, path: Path, after_bytes: int, timeout: float = TIME_LIMIT_S) -> str:
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
        else:
            os.kill(pid, signal.SIGKILL)
            return "hung"
        os.kill(pid, signal.SIGKILL)
    finally:
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass
    return "killed"


class _Spy:
    """Records, in order, the calls a save makes to os.fsync/os.fdatasync and os.replace/os.rename."""

    NAMES = ("fsync", "fdatasync", "replace", "rename")

    def __init__(self) -> None:
        self.calls: list[str] = []
        self._real = {n: getattr(os, n) for n in self.NAMES if hasattr(os, n)}

    def __enter__(self) -> _Spy:
        for name, real in self._real.items():
            def spy(*args, _name=name, _real=real, **kw):
                self.calls.append(_name)
                return _real(*args, **kw)
            setattr(os, name, spy)
        return self

    def __exit__(self, *exc) -> None:
        for name, real in self._real.items():
            setattr(os, name, real)

    def synced_before_rename(self) -> bool:
        renames = [i for i, c in enumerate(self.calls) if c in ("replace", "rename")]
        syncs = [i for i, c in enumerate(self.calls) if c in ("fsync", "fdatasync")]
        return bool(renames and syncs) and syncs[0] < renames[-1]


def _whole_cases(fn: Callable, old: dict, new: dict) -> list[Case]:
    """Two completed saves: the second must replace the first, and flush to disk before its rename."""
    import torch

    name = "a completed save replaces the old checkpoint"
    with tempfile.TemporaryDirectory(prefix="labkit-ckpt-") as d:
        path = Path(d) / "ckpt.pt"
        _, failed = attempt(name, lambda: fn(old, path), what="saving raised")
        if failed:
            return [failed]
        with _Spy() as spy:
            _, failed = attempt(name, lambda: fn(new, path), what="saving over an existing checkpoint raised")
        if failed:
            return [failed]
        try:
            step = int(torch.load(path, weights_only=True)["step"])
        except Exception as err:  # noqa: BLE001 - whatever the learner wrote, say it does not load
            return [Case(name, False, f"the checkpoint does not load after a completed save: {type(err).__name__}")]
    replaced = Case(name, step == 2, "" if step == 2 else f"path still holds step {step} after saving step 2",
                    REPLACES)
    synced = spy.synced_before_rename()
    flushed = Case(FSYNC_CASE, synced, "" if synced else (
        f"calls seen: {', '.join(spy.calls) or 'none'}. The kills above cannot catch this: a killed process's "
        "written pages stay in the kernel and still reach the disk. A power cut before they do would leave the "
        "renamed file empty or torn"), FSYNC)
    return [replaced, flushed]


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
            if how == "hung":
                cases.append(Case(name, False, f"the save neither wrote {after:,} B nor finished within "
                                  f"{TIME_LIMIT_S:.0f} s: does it wait for something that never comes?"))
                return cases  # the completed-save cases would hang in this process
            try:
                got = torch.load(path, weights_only=True)
                step = int(got["step"])
                whole = torch.equal(got["w"], (old if step == 1 else new)["w"])
                ok, detail = whole, "" if whole else f"step {step} loaded with the wrong weights (torn)"
            except Exception as err:  # noqa: BLE001 - a torn file fails to load in many ways
                ok, detail = False, f"after the kill ({how}) the checkpoint does not load: {type(err).__name__}"
        cases.append(Case(name, ok, detail, TORN))
    return cases + _whole_cases(fn, old, new)


register(CodingExercise(
    "06.code.atomic_save",
    "Write save(state, path): store the dict of tensors so that a SIGKILL at any moment leaves path loadable "
    "with torch.load(path, weights_only=True), holding the old checkpoint or the new one.",
    run,
    ("A kill can strike at any byte: never leave path half-written, and make sure the finished bytes are on the "
     "disk before anyone relies on them.",
     "save(state, path) returns nothing; torch.save accepts an open binary file as well as a path."),
    "torch.save to a temporary file in the same folder (path + '.tmp'), f.flush() and os.fsync(f.fileno()) before "
    "closing it, then os.replace(tmp, path): the rename is atomic on POSIX, so path holds the old file or the whole "
    "new one, and the new bytes are on the disk before the name points at them.",
))
