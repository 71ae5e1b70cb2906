"""Checkpoints of a Trainer with ``torch.distributed.checkpoint``: atomic, checked, and their stall measured.

* :func:`save_checkpoint` writes the trainer's full state (``labkit.resilience.state``) with
  ``dcp.save`` into ``step_N.tmp/`` and commits it atomically (``labkit.resilience.manifest``);
  inside a process group every rank writes its part and rank 0 commits.
* :func:`save_checkpoint_async` stages a copy with ``dcp.async_save`` and writes it on a
  background thread: training stalls only for the copy (the idea behind CheckFreq,
  Mohan et al., FAST 2021, and DCP's ``async_save``). :func:`measure_save_stall` times both
  on the training thread.
* :func:`latest_valid` walks checkpoints newest first and returns the newest sound one,
  with the reason each newer one was rejected; :func:`resume` loads it.

DCP needs no process group: with none (``no_dist``) it saves and loads in one process,
and ``async_save`` runs on a thread. Loading runs no code: the metadata goes through an
allow-list unpickler and tensors through ``torch.load(weights_only=True)``.
"""

from __future__ import annotations

import re
import shutil
import time
import warnings
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import FileSystemWriter
from torch.distributed.checkpoint.metadata import TensorStorageMetadata

from labkit.errors import LabkitError, require_positive
from labkit.resilience.manifest import TMP_SUFFIX, SafeReader, commit, publish, verify
from labkit.resilience.state import check_compatible, flat_state, restore, template
from labkit.rig.train import Trainer

_NAME = re.compile(r"^step_(\d+)$")
Hook = Callable[[str], None]
_SINGLE = r"torch\.distributed is .*single process"
# async_save warns again from its writer thread, outside any catch_warnings: filter it for the session too.
warnings.filterwarnings("ignore", message=_SINGLE, category=UserWarning)


@contextmanager
def _quiet() -> Iterator[None]:
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


@dataclass(frozen=True)
class Rejected:
    """A checkpoint that was passed over, and why."""

    name: str
    reason: str


@dataclass(frozen=True)
class Scan:
    """The outcome of :func:`latest_valid`: the chosen checkpoint (or None) and every rejection."""

    path: Path | None
    step: int | None
    rejected: tuple[Rejected, ...]


def step_dir(root: Path, step: int) -> Path:
    return Path(root) / f"step_{step:08d}"


def _group() -> bool:
    return dist.is_available() and dist.is_initialized()


def _rank() -> int:
    return dist.get_rank() if _group() else 0


def _barrier() -> None:
    if _group():
        dist.barrier()


def _finish(tmp: Path, final: Path, step: int, hook: Hook | None) -> SavedCheckpoint:
    if hook:
        hook("written")
    manifest = commit(tmp, step)
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
    rank, step = _rank(), trainer.steps_done
    final = step_dir(root, step)
    tmp = final.with_name(final.name + TMP_SUFFIX)
    if rank == 0:
        root.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)
    _barrier()
    with _quiet():
        dcp.save(flat_state(trainer, rank), storage_writer=FileSystemWriter(tmp, sync_files=True), no_dist=not _group())
    _barrier()
    saved = _finish(tmp, final, step, hook) if rank == 0 else None
    _barrier()
    return saved or SavedCheckpoint(final, step, 0, 0)


class PendingSave:
    """A checkpoint being written on a background thread; :meth:`wait` commits it."""

    def __init__(self, future: Future, tmp: Path, final: Path, step: int, stall_s: float) -> None:
        self._future, self._tmp, self._final, self.step, self.stall_s = future, tmp, final, step, stall_s
        self._saved: SavedCheckpoint | None = None

    def done(self) -> bool:
        return self._future.done()

    def wait(self) -> SavedCheckpoint:
        if self._saved is None:
            self._future.result()
            self._saved = _finish(self._tmp, self._final, self.step, None)
        return self._saved


def save_checkpoint_async(trainer: Trainer, root: str | Path) -> PendingSave:
    """Stage the state (a copy, so training may go on) and write it on a thread; one process only."""
    if _group():
        raise LabkitError("save_checkpoint_async is for a single process; use save_checkpoint inside a group")
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    final = step_dir(root, trainer.steps_done)
    tmp = final.with_name(final.name + TMP_SUFFIX)
    shutil.rmtree(tmp, ignore_errors=True)
    t0 = time.perf_counter()
    with _quiet():
        writer = FileSystemWriter(tmp, sync_files=True)
        future = dcp.async_save(flat_state(trainer), storage_writer=writer, no_dist=True)
    return PendingSave(future, tmp, final, trainer.steps_done, time.perf_counter() - t0)


def _saved_entries(path: Path) -> tuple[dict[str, tuple[tuple[int, ...], torch.dtype]], list[str]]:
    md = SafeReader(path).read_metadata().state_dict_metadata
    entries, problems = {}, []
    for key, meta in md.items():
        if isinstance(meta, TensorStorageMetadata):
            entries[key] = (tuple(meta.size), meta.properties.dtype)
        else:
            problems.append(f"entry {key} is not a tensor")
    return entries, problems


def check_checkpoint(path: str | Path, trainer: Trainer, rank: int = 0) -> str | None:
    """Why ``path`` cannot be loaded into ``trainer`` (manifest, checksums, shapes), or None if it can."""
    path = Path(path)
    reason, manifest = verify(path)
    if reason is None and manifest["step"] != int(_NAME.match(path.name).group(1)):
        reason = f"manifest says step {manifest['step']}, the directory name says otherwise"
    if reason is None:
        try:
            entries, problems = _saved_entries(path)
        except Exception as err:  # noqa: BLE001 - any failure to read the index rejects the checkpoint
            return f"metadata unreadable: {type(err).__name__}: {err}"
        problems += check_compatible(trainer, entries, rank)
        reason = "; ".join(problems[:3]) + (f" (+{len(problems) - 3} more)" if len(problems) > 3 else "") or None
    return reason


def latest_valid(root: str | Path, trainer: Trainer, rank: int = 0) -> Scan:
    """The newest checkpoint under ``root`` that is complete, intact and fits ``trainer``.

    Unfinished writes (``*.tmp``) are reported and skipped; each rejected checkpoint comes
    back with its reason, newest first.
    """
    root = Path(root)
    if not root.is_dir():
        return Scan(None, None, ())
    rejected = [Rejected(p.name, "incomplete write (.tmp): never committed, ignored")
                for p in sorted(root.glob(f"step_*{TMP_SUFFIX}"), reverse=True)]  # fmt: skip
    found = sorted(((int(m.group(1)), p) for p in root.iterdir() if (m := _NAME.match(p.name))), reverse=True)
    for step, path in found:
        reason = check_checkpoint(path, trainer, rank)
        if reason is None:
            return Scan(path, step, tuple(rejected))
        rejected.append(Rejected(path.name, reason))
    return Scan(None, None, tuple(rejected))


def load_checkpoint(trainer: Trainer, path: str | Path, rank: int = 0) -> int:
    """Load a checked checkpoint into ``trainer`` (collective inside a group); returns its step."""
    path = Path(path)
    reason = check_checkpoint(path, trainer, rank)
    if reason is not None:
        raise LabkitError(f"checkpoint {path.name} cannot be loaded: {reason}")
    entries, _ = _saved_entries(path)
    state = template(trainer, entries, rank)
    with _quiet():
        dcp.load(state, storage_reader=SafeReader(path), no_dist=not _group())
    restore(trainer, state, rank)
    return trainer.steps_done


def clean_incomplete(root: str | Path) -> list[str]:
    """Remove unfinished writes (``*.tmp`` directories); returns their names."""
    gone = sorted(p.name for p in Path(root).glob(f"*{TMP_SUFFIX}") if p.is_dir())
    for name in gone:
        shutil.rmtree(Path(root) / name, ignore_errors=True)
    return gone


def resume(trainer: Trainer, root: str | Path) -> Scan:
    """Load the newest valid checkpoint under ``root`` into ``trainer`` (if any) and clean unfinished writes."""
    rank = _rank()
    scan = latest_valid(root, trainer, rank)
    if _group():  # every rank must load the same step: rank 0 decides
        choice = torch.tensor([-1 if scan.step is None else scan.step])
        dist.broadcast(choice, src=0)
        step = int(choice)
        scan = Scan(None if step < 0 else step_dir(Path(root), step), None if step < 0 else step, scan.rejected)
    if scan.path is not None:
        load_checkpoint(trainer, scan.path, rank)
    _barrier()
    if rank == 0 and Path(root).is_dir():
        clean_incomplete(root)
    _barrier()
    return scan


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
