"""Checkpoints of a Trainer with ``torch.distributed.checkpoint``: atomic, checked, and their stall measured.

* :func:`save_checkpoint` writes the trainer's full state (``labkit.resilience.state``) with
  ``dcp.save`` into ``step_N.tmp/`` and commits it atomically (``labkit.resilience.manifest``);
  inside a process group every rank writes its part and rank 0 commits.
* :func:`save_checkpoint_async` stages a copy with ``dcp.async_save`` and writes it on a
  background thread: training stalls only for the copy (the idea behind CheckFreq,
  Mohan et al., FAST 2021, and DCP's ``async_save``). :func:`measure_save_stall` times both
  on the training thread.
* ``labkit.resilience.scan`` finds the newest sound checkpoint of this run and loads it.

DCP needs no process group: with none (``no_dist``) it saves and loads in one process,
and ``async_save`` runs on a thread. Loading runs no code: DCP's pickled ``.metadata`` is
never opened (the index is JSON in the manifest, ``labkit.resilience.index``) and tensors
are read through ``torch.load(weights_only=True)`` after every file they come from is checked.
"""

from __future__ import annotations

import errno
import os
import time
import warnings
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch.distributed as dist
import torch.distributed.checkpoint as dcp

from labkit.errors import LabkitError, require_positive
from labkit.resilience.index import IndexingWriter, to_json
from labkit.resilience.manifest import TMP_SUFFIX, commit, publish, remove
from labkit.resilience.state import flat_state, run_identity
from labkit.rig.train import Trainer

Hook = Callable[[str], None]
_SINGLE = r"torch\.distributed is .*single process"
# async_save warns again from its writer thread, outside any catch_warnings: filter it for the session too.
warnings.filterwarnings("ignore", message=_SINGLE, category=UserWarning)


@contextmanager
def quiet() -> Iterator[None]:
    """One process without a group is the intended use here, not an accident worth a warning per save."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=_SINGLE, category=UserWarning)
        yield


@dataclass(frozen=True)
class SavedCheckpoint:
    """A committed checkpoint: where, which step, how many bytes in how many files."""

    path: Path
    step: int
    bytes: int
    files: int


def step_dir(root: Path, step: int) -> Path:
    return Path(root) / f"step_{step:08d}"


def _root_problem(root: Path, err: BaseException) -> str:
    if isinstance(err, ValueError):
        return "it contains a NUL byte"
    if isinstance(err, FileExistsError):  # something is there that is no folder: a symlink loop, or a file
        try:
            os.stat(root)
            return "it is a file, not a folder"
        except OSError as inner:
            err = inner
    text = getattr(err, "strerror", None) or str(err)
    return text + (" (a symlink loop)" if getattr(err, "errno", None) == errno.ELOOP else "")


def checkpoint_root(root: str | Path, create: bool = True) -> Path:
    """``root`` as a folder checkpoints can go in (made if ``create``), or one LabkitError naming it and why:
    a symlink loop, a name too long, a NUL byte, a read-only or missing parent raised raw OS errors before."""
    root = Path(root)
    try:
        if create:
            root.mkdir(parents=True, exist_ok=True)
        else:
            root.is_symlink()  # a name too long or a NUL byte raises here; a missing folder does not
    except (OSError, ValueError) as err:
        shown = repr(str(root)) if len(str(root)) <= 80 else f"{str(root)[:60]!r}... ({len(str(root))} characters)"
        raise LabkitError(f"root must be a folder labkit can create and write: {_root_problem(root, err)} "
                          f"(got {shown})") from None
    return root


def in_group() -> bool:
    return dist.is_available() and dist.is_initialized()


def group_rank() -> int:
    return dist.get_rank() if in_group() else 0


def barrier() -> None:
    if in_group():
        dist.barrier()


def _finish(tmp: Path, final: Path, step: int, writer: IndexingWriter, run: dict, hook: Hook | None) -> SavedCheckpoint:
    if hook:
        hook("written")
    if writer.metadata is None:
        raise LabkitError(f"the save of step {step} wrote no index: DCP did not finish")
    manifest = commit(tmp, step, to_json(writer.metadata), run)
    if hook:
        hook("manifest")
    publish(tmp, final)
    size = sum(f["bytes"] for f in manifest["files"].values())
    return SavedCheckpoint(final, step, size, len(manifest["files"]) + 1)


def save_checkpoint(trainer: Trainer, root: str | Path, *, hook: Hook | None = None) -> SavedCheckpoint:
    """Save ``trainer`` as ``root/step_N`` (N = steps done), atomically; collective inside a group.

    ``hook(phase)`` is called on rank 0 after the data is written (``"written"``) and after
    the manifest is durable but before the rename (``"manifest"``): the places where the
    crash tests kill the process. Ranks other than 0 get a result with 0 bytes and 0 files.
    """
    root = Path(root)
    rank, step = group_rank(), trainer.steps_done
    final = step_dir(root, step)
    tmp = final.with_name(final.name + TMP_SUFFIX)
    if rank == 0:
        checkpoint_root(root)
        remove(tmp)  # a planted symlink is unlinked, never written through
    barrier()
    writer = IndexingWriter(tmp, sync_files=True)
    try:
        with quiet():
            dcp.save(flat_state(trainer, rank), storage_writer=writer, no_dist=not in_group())
        barrier()
        saved = _finish(tmp, final, step, writer, run_identity(trainer), hook) if rank == 0 else None
    except Exception:
        if rank == 0:
            remove(tmp)
        raise
    barrier()
    return saved or SavedCheckpoint(final, step, 0, 0)


class PendingSave:
    """A checkpoint being written on a background thread; :meth:`wait` commits it."""

    def __init__(self, future: Future, tmp: Path, final: Path, step: int, stall_s: float,
                 writer: IndexingWriter, run: dict) -> None:
        self._future, self._tmp, self._final, self.step, self.stall_s = future, tmp, final, step, stall_s
        self._writer, self._run = writer, run
        self._saved: SavedCheckpoint | None = None

    def done(self) -> bool:
        return self._future.done()

    def wait(self) -> SavedCheckpoint:
        if self._saved is None:
            try:
                self._future.result()
                self._saved = _finish(self._tmp, self._final, self.step, self._writer, self._run, None)
            except Exception:
                remove(self._tmp)
                raise
        return self._saved


def save_checkpoint_async(trainer: Trainer, root: str | Path) -> PendingSave:
    """Stage the state (a copy, so training may go on) and write it on a thread; one process only."""
    if in_group():
        raise LabkitError("save_checkpoint_async is for a single process; use save_checkpoint inside a group")
    root = checkpoint_root(root)
    final = step_dir(root, trainer.steps_done)
    tmp = final.with_name(final.name + TMP_SUFFIX)
    remove(tmp)
    t0 = time.perf_counter()
    with quiet():
        writer = IndexingWriter(tmp, sync_files=True)
        future = dcp.async_save(flat_state(trainer), storage_writer=writer, no_dist=True)
    stall = time.perf_counter() - t0
    return PendingSave(future, tmp, final, trainer.steps_done, stall, writer, run_identity(trainer))


@dataclass(frozen=True)
class SaveStall:
    """Seconds the training thread waits per checkpoint (sync save vs async staging); tensor and file bytes."""

    sync_s: float
    async_stall_s: float
    async_total_s: float
    state_bytes: int  # tensor payload: what the state holds
    disk_bytes: int  # what the files hold (payload + DCP's per-tensor framing + index)
    repeats: int


def measure_save_stall(trainer: Trainer, root: str | Path, repeats: int = 3) -> SaveStall:
    """Median of ``repeats`` sync saves and async saves of the same state (wall clock: shown, never asserted)."""
    require_positive("repeats", repeats)
    sync, stall, total, size = [], [], [], 0
    payload = sum(t.numel() * t.element_size() for t in flat_state(trainer).values())
    for _ in range(repeats):
        t0 = time.perf_counter()
        size = save_checkpoint(trainer, Path(root) / "sync").bytes
        sync.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        pending = save_checkpoint_async(trainer, Path(root) / "async")
        stall.append(pending.stall_s)
        pending.wait()
        total.append(time.perf_counter() - t0)
    med = lambda xs: sorted(xs)[len(xs) // 2]  # noqa: E731
    return SaveStall(med(sync), med(stall), med(total), payload, size, repeats)
