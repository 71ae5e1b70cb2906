"""Find the newest checkpoint that is sound and belongs to this run, and load it: never a wrong state, never a raise.

:func:`check_checkpoint` says why a folder cannot be loaded, in this order: the manifest and
every file it lists (``labkit.resilience.manifest.verify``); DCP's index, rebuilt from JSON
and reading only listed files (``labkit.resilience.index``); the step, which the folder's name,
the manifest and the state's own step counter must all agree on; shapes and dtypes against
the model; and the run's identity (seed, data, configuration). :func:`latest_valid` walks
checkpoints newest first and skips each bad entry with its reason: a malformed manifest, a
file or symlink named like a checkpoint, an unfinished ``.tmp`` write. :func:`resume` loads
the newest sound one and falls back to the next if loading it still fails.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.metadata import Metadata

from labkit.errors import LabkitError
from labkit.resilience.checkpoint import barrier, checkpoint_root, group_rank, in_group, quiet, step_dir
from labkit.resilience.index import JsonIndexReader, from_json, read_tensor
from labkit.resilience.manifest import TMP_SUFFIX, remove, verify
from labkit.resilience.state import STEPS_KEY, check_compatible, restore, run_identity, template
from labkit.rig.train import Trainer

_NAME = re.compile(r"^step_(\d+)$")


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


def _entries(metadata: Metadata) -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
    return {k: (tuple(m.size), m.properties.dtype) for k, m in metadata.state_dict_metadata.items()}


def _identity_problem(saved: dict, here: dict) -> str | None:
    for field in ("seed", "data", "config"):
        if saved.get(field) != here[field]:
            return f"another run's checkpoint: its {field} is {saved.get(field)!r}, this run's is {here[field]!r}"
    return None


def _check(path: Path, trainer: Trainer, rank: int) -> tuple[str | None, Metadata | None]:
    reason, manifest = verify(path)
    if reason is not None:
        return reason, None
    files = {name: entry["bytes"] for name, entry in manifest["files"].items()}
    try:
        metadata = from_json(manifest.get("index"), files)
    except LabkitError as err:
        return str(err), None
    step, named = manifest["step"], _NAME.match(path.name)
    if named and int(named.group(1)) != step:
        return f"manifest says step {step}, the directory name says {int(named.group(1))}", None
    problems = check_compatible(trainer, _entries(metadata), rank)
    if problems:
        return "; ".join(problems[:3]) + (f" (+{len(problems) - 3} more)" if len(problems) > 3 else ""), None
    stored = read_tensor(path, metadata, STEPS_KEY)
    if stored.numel() != 1 or int(stored) != step:
        return f"the state's own step is {stored.tolist()}, the manifest says {step}", None
    return _identity_problem(manifest["run"], run_identity(trainer)), metadata


def check_checkpoint(path: str | Path, trainer: Trainer, rank: int = 0) -> str | None:
    """Why ``path`` cannot be loaded into ``trainer``, or None if it can; whatever is on disk, it never raises."""
    try:
        return _check(Path(path), trainer, rank)[0]
    except Exception as err:  # noqa: BLE001 - anything unreadable rejects the checkpoint
        return f"unreadable: {type(err).__name__}: {err}"


def latest_valid(root: str | Path, trainer: Trainer, rank: int = 0, skip: tuple[str, ...] = ()) -> Scan:
    """The newest checkpoint under ``root`` that is complete, intact, of this run and fits ``trainer``.

    Unfinished writes (``*.tmp``) are reported and skipped; each rejected checkpoint comes
    back with its reason, newest first. Names in ``skip`` are passed over unchecked.
    """
    root = checkpoint_root(root, create=False)
    if root.is_symlink() or not root.is_dir():
        return Scan(None, None, ())
    rejected = [Rejected(p.name, "incomplete write (.tmp): never committed, ignored")
                for p in sorted(root.glob(f"step_*{TMP_SUFFIX}"), reverse=True)]  # fmt: skip
    found = sorted(((int(m.group(1)), p) for p in root.iterdir() if (m := _NAME.match(p.name))), reverse=True)
    for step, path in found:
        if path.name in skip:
            continue
        reason = check_checkpoint(path, trainer, rank)
        if reason is None:
            return Scan(path, step, tuple(rejected))
        rejected.append(Rejected(path.name, reason))
    return Scan(None, None, tuple(rejected))


def load_checkpoint(trainer: Trainer, path: str | Path, rank: int = 0) -> int:
    """Load a checked checkpoint into ``trainer`` (collective inside a group); returns its step.

    Raises :class:`LabkitError` with the reason when the checkpoint is unsound or its load
    fails (DCP's ``CheckpointException`` is a ``BaseException``; it is caught here).
    """
    path = Path(path)
    try:
        reason, metadata = _check(path, trainer, rank)
    except Exception as err:  # noqa: BLE001
        reason, metadata = f"unreadable: {type(err).__name__}: {err}", None
    if reason is not None or metadata is None:
        raise LabkitError(f"checkpoint {path.name} cannot be loaded: {reason}")
    state = template(trainer, _entries(metadata), rank)
    try:
        with quiet():
            dcp.load(state, storage_reader=JsonIndexReader(path, metadata), no_dist=not in_group())
    except (Exception, CheckpointException) as err:
        raise LabkitError(f"checkpoint {path.name} cannot be loaded: {type(err).__name__}: {err}"[:500]) from None
    restore(trainer, state, rank)
    return trainer.steps_done


def clean_incomplete(root: str | Path) -> list[str]:
    """Remove unfinished writes (``*.tmp``: directories, files or symlinks, never their targets); returns names."""
    gone = sorted(p.name for p in Path(root).glob(f"*{TMP_SUFFIX}"))
    for name in gone:
        try:
            remove(Path(root) / name)
        except OSError:
            pass
    return gone


def resume(trainer: Trainer, root: str | Path) -> Scan:
    """Load the newest valid checkpoint under ``root`` into ``trainer`` (if any) and clean unfinished writes.

    In one process a checkpoint whose load still fails is rejected with the reason and the
    next older one is tried; in a group rank 0 chooses and every rank loads that step.
    """
    rank = group_rank()
    scan = latest_valid(root, trainer, rank)
    if in_group():  # every rank must load the same step: rank 0 decides
        choice = torch.tensor([-1 if scan.step is None else scan.step])
        dist.broadcast(choice, src=0)
        step = int(choice)
        scan = Scan(None if step < 0 else step_dir(Path(root), step), None if step < 0 else step, scan.rejected)
        if scan.path is not None:
            load_checkpoint(trainer, scan.path, rank)
    else:
        failed: list[Rejected] = []
        while scan.path is not None:
            try:
                load_checkpoint(trainer, scan.path, rank)
                break
            except LabkitError as err:
                failed.append(Rejected(scan.path.name, str(err)))
                scan = latest_valid(root, trainer, rank, skip=tuple(r.name for r in failed))
        scan = Scan(scan.path, scan.step, tuple(failed) + scan.rejected)
    barrier()
    if rank == 0 and Path(root).is_dir():
        clean_incomplete(root)
    barrier()
    return scan
