"""The untrusted side of a build-it check: start ranks that load the learner's module, bring back plain records.

Everything here runs where the learner's code runs, or starts the processes that run it; nothing here decides a
verdict. :func:`ranks` starts a group with ``labkit.dist.run(..., untrusted=True)`` (a rank's report is read
with ``torch.load(weights_only=True)``, bounded in size: :mod:`labkit.dist.results`), so what comes back is
tensors, numbers, strings, lists and dicts only, and a learner's fault (an exception, a hang, a crash) comes back
as a plain ``{"failure": {...}}`` entry, never as an exception of the caller. Each rank's stderr is captured to a
file (gloo's own explanation of a collective mismatch is written there by C++ before it aborts), and every
torch.distributed call the learner's code makes while :func:`recording` is active is logged to a per-rank file
as it starts and ends, so a rank killed at the deadline still says which call it was blocked in.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import itertools
import os
import re
import sys
import tempfile
import time
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from labkit import dist as ldist
from labkit.errors import LabkitError

MAX_OPS = 4000  # per rank: far above any honest step of the exercises (tens of calls)
STDERR_TAIL = 4000  # characters of a rank's stderr kept in the record
MAX_LOG_BYTES = 2**20  # of a rank's op log read back
POINT_TO_POINT = ("send", "recv", "isend", "irecv")
COLLECTIVES = ("all_reduce", "reduce_scatter_single", "reduce_scatter_tensor", "reduce_scatter",
               "all_gather_single", "all_gather_into_tensor", "all_gather", "broadcast", "barrier", "reduce",
               "all_to_all_single", "scatter", "gather")
_active: list[Any] = []  # the op log of this rank while recording (one at most)
_loaded = itertools.count()


def load_module(path: str | Path) -> types.ModuleType:
    """Import the learner's module from its file under a fresh name (a re-run after an edit sees the edit)."""
    path = Path(path)
    if path.suffix != ".py" or not path.is_file():
        raise LabkitError(f"path must be an existing .py file (got {str(path)!r})")
    name = f"labkit_build_{path.stem}_{next(_loaded)}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise LabkitError(f"path must be a Python module (cannot load {str(path)!r})")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and pickling look the module up by name
    spec.loader.exec_module(module)
    return module


def learner_frames(remote_traceback: str, path: str | Path) -> str:
    """The traceback lines inside the learner's file: where in THEIR code it raised."""
    name = Path(path).name
    lines = remote_traceback.splitlines()
    picked = [f"{ln.strip()} -> {lines[i + 1].strip()}" for i, ln in enumerate(lines[:-1])
              if name in ln and "File" in ln]  # fmt: skip
    return "; ".join(picked[-2:])


class OpLog:
    """One rank's log of the torch.distributed calls made while :func:`recording`: a line when each starts,
    one when it ends, flushed at once (a killed rank's file still shows where it blocked)."""

    def __init__(self, folder: str | Path, rank: int) -> None:
        self.file = open(Path(folder) / f"rank{rank}.ops", "a", buffering=1)  # noqa: SIM115 - kept for the run
        self.count = 0
        self.t0 = time.time()

    def start(self, op: str, peer: int, numel: int) -> int:
        self.count += 1
        if self.count <= MAX_OPS:
            self.file.write(f"start {self.count} {op} {peer} {numel} {time.time() - self.t0:.6f}\n")
        return self.count

    def end(self, seq: int) -> None:
        if seq <= MAX_OPS:
            self.file.write(f"end {seq} {time.time() - self.t0:.6f}\n")

    def mark(self, label: str) -> None:
        """A boundary in the log (``mark:<label>``, e.g. where step 2 starts), so a judge can split the calls."""
        self.end(self.start(f"mark:{label}", -1, 0))

    def note(self, key: str, value: int) -> None:
        """A fact the rank measured that must survive a crash later in the run (e.g. the shard's size)."""
        self.file.write(f"note {key} {int(value)}\n")


class _Work:
    """A non-blocking call's work, whose ``wait`` is logged (where a rank blocks on an isend or irecv)."""

    def __init__(self, work: Any, op: str, peer: int, numel: int) -> None:
        self._work, self._what = work, (op + ".wait", peer, numel)

    def wait(self, *args: Any, **kwargs: Any) -> Any:
        log = _active[0] if _active else None
        seq = log.start(*self._what) if log else 0
        out = self._work.wait(*args, **kwargs)
        if log:
            log.end(seq)
        return out

    def __getattr__(self, name: str) -> Any:
        return getattr(self._work, name)


def _numel(args: tuple, kwargs: dict) -> int:
    """Elements a call covers: its largest tensor argument (a list of tensors counts whole), as ZeRO counts."""
    sizes = [0]
    for a in (*args, *kwargs.values()):
        if isinstance(a, torch.Tensor):
            sizes.append(a.numel())
        elif isinstance(a, list | tuple):
            sizes.append(sum(t.numel() for t in a if isinstance(t, torch.Tensor)))
    return max(sizes)


def _logged(name: str, real: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(real)
    def call(*args: Any, **kwargs: Any) -> Any:
        log = _active[0] if _active else None
        if log is None:
            return real(*args, **kwargs)
        peer = -1
        if name in (*POINT_TO_POINT, "reduce", "broadcast"):
            peer = args[1] if len(args) > 1 else kwargs.get("dst", kwargs.get("src", -1))
        numel = _numel(args, kwargs)
        seq = log.start(name, int(peer) if isinstance(peer, int) else -1, numel)
        out = real(*args, **kwargs)
        log.end(seq)
        if name in ("isend", "irecv") or (kwargs.get("async_op") and out is not None):
            return _Work(out, name, int(peer) if isinstance(peer, int) else -1, numel)
        return out

    call._labkit_logged = True  # type: ignore[attr-defined]
    return call


def _install() -> None:
    """Wrap torch.distributed's calls in this (rank) process once; they log only while recording."""
    for name in (*POINT_TO_POINT, *COLLECTIVES):
        real = getattr(dist, name, None)
        if real is not None and not getattr(real, "_labkit_logged", False):
            setattr(dist, name, _logged(name, real))


@contextlib.contextmanager
def recording(log: OpLog) -> Iterator[OpLog]:
    """(In a rank.) Log every torch.distributed call made inside, the learner's module's included."""
    _install()
    _active[:] = [log]
    try:
        yield log
    finally:
        _active.clear()


def _entry(rank: int, world_size: int, target: Callable[..., Any], logdir: str, **kwargs: Any) -> Any:
    """(In a rank.) Send this rank's stderr to a file, then run the exercise's rank function with an op log."""
    fd = os.open(Path(logdir) / f"rank{rank}.err", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(fd, 2)
    os.close(fd)
    return target(rank, world_size, log=OpLog(logdir, rank), **kwargs)


_START = re.compile(r"start (\d+) (\S{1,60}) (-?\d{1,9}) (\d{1,15}) ([\d.]{1,20})$")
_END = re.compile(r"end (\d+) ([\d.]+)$")
_NOTE = re.compile(r"note (\w{1,40}) (-?\d{1,18})$")


def read_notes(path: Path) -> dict[str, int]:
    """A rank's notes (:meth:`OpLog.note`) as ``{key: value}``, the last value of each key."""
    if not path.exists():
        return {}
    return {m[1]: int(m[2]) for line in _lines(path) if (m := _NOTE.match(line.strip()))}


def _lines(path: Path) -> list[str]:
    """The first lines of a rank's log, at most :data:`MAX_LOG_BYTES` of them (the file is the learner's process's)."""
    with open(path, "rb") as f:
        return f.read(MAX_LOG_BYTES).decode("utf-8", errors="replace").splitlines()[: 2 * MAX_OPS + 2]


def read_ops(path: Path) -> list[list]:
    """A rank's op log as ``[[op, peer, numel, t_start, t_end or None], ...]`` in call order (malformed lines
    are skipped: the file is the learner process's)."""
    if not path.exists():
        return []
    ops: dict[int, list] = {}
    for line in _lines(path):
        if m := _START.match(line.strip()):
            ops[int(m[1])] = [m[2], int(m[3]), int(m[4]), float(m[5]), None]
        elif (m := _END.match(line.strip())) and int(m[1]) in ops:
            ops[int(m[1])][4] = float(m[2])
    return [ops[k] for k in sorted(ops)]


def _tail(path: Path) -> str:
    if not path.exists():
        return ""
    with open(path, "rb") as f:
        f.seek(max(0, path.stat().st_size - STDERR_TAIL))
        return f.read().decode("utf-8", errors="replace")


def _failure(err: Exception, path: str | Path) -> dict[str, Any]:
    if isinstance(err, ldist.WorkerTimeout):
        return {"kind": "timeout", "message": str(err), "learner_frames": "", "ranks": list(err.ranks)}
    remote = getattr(err, "remote_traceback", "")
    kind = "not_written" if "NotImplementedError" in str(err) else (
        "raised" if remote else "died")  # fmt: skip
    return {"kind": kind, "message": str(err)[:2000], "learner_frames": learner_frames(remote, path),
            "rank": int(getattr(err, "rank", -1))}


def ranks(fn: Callable[..., Any], world_size: int, path: str | Path, *, timeout: float, **kwargs: Any) -> dict:
    """Run the rank function ``fn(rank, world_size, log=OpLog, path=..., **kwargs)`` on ``world_size`` ranks.

    Returns ``{"world": N, "ranks": [what each rank returned], "ops": [...], "stderr": [...]}`` or, when the
    learner's code raised, hung or crashed, ``{"world": N, "failure": {...}, "ops": [...], "stderr": [...]}``:
    ``ops`` is each rank's logged torch.distributed calls (the last one without an end is where it blocked),
    ``notes`` each rank's :meth:`OpLog.note` facts, ``stderr`` the tail of what each rank wrote to its stderr
    (gloo's and torch's own messages).
    """
    with tempfile.TemporaryDirectory(prefix="labkit-build-") as logdir:
        out: dict[str, Any] = {"world": world_size}
        try:
            out["ranks"] = ldist.run(_entry, world_size, timeout=timeout, untrusted=True, target=fn, logdir=logdir,
                                     path=str(path), **kwargs)
        except (ldist.WorkerError, ldist.WorkerTimeout) as err:
            out["failure"] = _failure(err, path)
        out["ops"] = [read_ops(Path(logdir) / f"rank{r}.ops") for r in range(world_size)]
        out["notes"] = [read_notes(Path(logdir) / f"rank{r}.ops") for r in range(world_size)]
        out["stderr"] = [_tail(Path(logdir) / f"rank{r}.err") for r in range(world_size)]
    return out


def ask(fn: Callable[..., Any], path: str | Path, *, timeout: float = 30.0, **kwargs: Any) -> dict:
    """Ask the learner's module something that needs no group (a schedule, bounds) in a 1-rank child process."""
    return ranks(fn, 1, path, timeout=timeout, **kwargs)


def grouped(fn: Callable[..., Any], paths: list[Path], params: dict[str, Any], timeout: float) -> list[dict]:
    """One record per module: for each world size in ``params["worlds"]``, one launch of ``fn`` that runs every
    module (``paths=[...]``; each rank returns one entry per module, in order).

    A test groups its mutants this way (one group of processes per world for all of them); a learner's check is
    the list of one. A launch that fails (a hang, a crash) is that world's fault entry in every module's record,
    and the next world sizes are skipped: they would only repeat it, and its timeout.
    """
    out: list[dict[str, Any]] = [{"runs": []} for _ in paths]
    for world in params["worlds"]:
        got = ranks(fn, int(world), paths[0], timeout=timeout * len(paths), params=params,
                    paths=[str(p) for p in paths])
        ok = isinstance(got.get("ranks"), list) and all(isinstance(r, list) and len(r) == len(paths)
                                                         for r in got["ranks"])  # fmt: skip
        for i, rec in enumerate(out):
            rec["runs"].append({**got, "ranks": [r[i] for r in got["ranks"]]} if ok else got)
        if not ok:
            break
    return out
