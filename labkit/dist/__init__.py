"""Local process groups from a notebook cell: start N ranks, get their results, clean up.

``run(fn, world_size)`` starts ``world_size`` processes on this machine (``context``), joins
them into a ``torch.distributed`` group (gloo, or NCCL under torchrun on GPUs),
calls ``fn(rank, world_size, **kwargs)`` in each, and returns the per-rank
results in rank order. It is written for a classroom kernel that re-runs cells:

* every listener stays on 127.0.0.1: the rendezvous is a fresh file
  (``init_method="file://..."``), not a TCP store, and gloo's own sockets are
  pinned to the loopback interface (``GLOO_SOCKET_IFNAME=lo``); no fixed port,
  so no clash when a cell runs twice;
* a worker's exception comes back as a :class:`WorkerError` naming its rank and
  carrying its traceback; the other ranks are stopped at once;
* a rank that exits without reporting (whatever its exit code) is a :class:`WorkerError`
  naming that rank and its exit code;
* a worker that hangs is killed ``timeout`` seconds after every rank has started (a slow start on
  a loaded machine is not a hang) and a :class:`WorkerTimeout`
  names the rank that did not reach the collective the others wait in (``labkit.dist.diagnose``);
* no orphans: every child is killed and reaped when ``run`` returns or raises
  (even on KeyboardInterrupt), and a child dies with its launcher, even a SIGKILLed one
  (``PR_SET_PDEATHSIG`` and :mod:`labkit.dist.lifeline`), and so then do the forkserver and resource tracker;
* ``run_outcomes`` is the same launch for a rank that dies on purpose: the others carry
  on, and each rank's exit code, result or error comes back instead of an exception.

``fn`` must be importable (a function of a labkit module): spawn cannot pickle a
function defined in a notebook. The same ``fn`` runs under ``torchrun`` through
:func:`main_under_torchrun`. The launcher is written here because torch's own
(``torch.multiprocessing.spawn``, ``torchrun``) neither return values to a
caller nor bound a hung worker by a deadline.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import shutil
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from multiprocessing.connection import wait
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from labkit.dist import diagnose, lifeline, results
from labkit.dist.context import context
from labkit.errors import LabkitError, require_positive

MAX_LOCAL_RANKS = 8
FAILURE_GRACE_S = 2.0
LOOPBACK = "lo0" if sys.platform == "darwin" else "lo"  # the loopback interface's name


class WorkerError(RuntimeError):
    """A rank raised: ``rank`` is which, ``remote_traceback`` is its traceback."""

    def __init__(self, rank: int, message: str, remote_traceback: str) -> None:
        super().__init__(f"rank {rank} failed: {message}")
        self.rank, self.remote_traceback = rank, remote_traceback


class WorkerTimeout(RuntimeError):
    """Some ranks did not finish in time; they were killed. ``culprits``: those not inside a collective."""

    def __init__(self, ranks: list[int], timeout: float, wheres: list[diagnose.Where] | None = None) -> None:
        super().__init__(diagnose.hang_message(ranks, timeout, wheres or []))
        self.ranks = ranks
        self.culprits = [w.rank for w in wheres or [] if w.collective is None]


@dataclass(frozen=True)
class _Job:
    fn: Callable[..., Any]
    world_size: int
    kwargs: dict[str, Any]
    workdir: str
    threads: int
    timeout: float
    seed: int
    untrusted: bool = False
    launcher: int = 0  # the launcher's pid: a rank dies with it (labkit.dist.lifeline)


def _worker(rank: int, job: _Job) -> None:
    lifeline.die_with_parent()
    lifeline.die_with(job.launcher)  # its parent is the forkserver, which a killed launcher leaves alive
    diagnose.arm(job.workdir, rank)
    os.environ.update(GLOO_SOCKET_IFNAME=LOOPBACK, MASTER_ADDR="127.0.0.1")
    out = Path(job.workdir) / f"rank{rank}.pkl"
    failed_at = None  # taken before the group is torn down, which makes the peers fail too
    try:
        torch.set_num_threads(job.threads)
        torch.manual_seed(job.seed)
        dist.init_process_group(
            "gloo", init_method=f"file://{job.workdir}/rendezvous", rank=rank, world_size=job.world_size,
            timeout=datetime.timedelta(seconds=job.timeout + diagnose.START_LIMIT_S),  # the parent's fires first
        )  # fmt: skip
        try:
            result = job.fn(rank, job.world_size, **job.kwargs)
        except BaseException:
            failed_at = time.time()
            raise
        results.write(out, ("ok", result), job.untrusted)
    except BaseException as err:  # noqa: BLE001 - everything goes back to the parent
        when = failed_at or time.time()
        # Report first and leave the group without a clean shutdown: destroying it could wait on
        # collectives in flight; exiting closes the sockets, which tells the peers at once.
        results.write(out, ("error", f"{type(err).__name__}: {err}", traceback.format_exc(), when), job.untrusted)
        os._exit(1)
    # Reported before teardown: gloo's teardown aborts now and then (exit -6, about 1 run in 25
    # here); the parent accepts a rank that reported "ok" whatever its exit code.
    with contextlib.suppress(Exception):
        dist.destroy_process_group()


def _stop(procs: list) -> None:
    started = [p for p in procs if p.pid is not None]  # one that failed to start cannot be joined
    for p in started:
        if p.is_alive():
            p.kill()
    for p in started:
        p.join(timeout=10)


@contextmanager
def _group(fn: Callable[..., Any], world_size: int, timeout: float, threads: int, seed: int,
           kwargs: dict[str, Any], untrusted: bool = False) -> Iterator[tuple[list, Path]]:
    """Check the arguments and start the ranks; on leaving, kill and reap every child, remove the folder."""
    require_positive("world_size", world_size)
    if world_size > MAX_LOCAL_RANKS:
        raise LabkitError(f"world_size must be at most {MAX_LOCAL_RANKS} on one machine (got {world_size})")
    require_positive("timeout", timeout, integer=False)
    require_positive("threads", threads)
    if getattr(fn, "__module__", "__main__") == "__main__" or "<locals>" in getattr(fn, "__qualname__", ""):
        raise LabkitError(f"fn must be a function of an importable module, not {fn!r} (spawn cannot pickle it)")
    workdir, procs = tempfile.mkdtemp(prefix="labkit-dist-"), []
    try:
        job = _Job(fn, world_size, kwargs, workdir, threads, timeout, seed, untrusted, os.getpid())
        procs = [context().Process(target=_worker, args=(r, job), daemon=True, name=f"labkit-rank{r}")
                 for r in range(world_size)]  # fmt: skip
        for p in procs:
            p.start()
        yield procs, Path(workdir)
    finally:
        try:
            _stop(procs)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)


def run(fn: Callable[..., Any], world_size: int, *, timeout: float = 60.0, threads: int = 1, seed: int = 0,
        untrusted: bool = False, **kwargs: Any) -> list[Any]:
    """Run ``fn(rank, world_size, **kwargs)`` on ``world_size`` local ranks; results in rank order.

    ``threads`` is torch's intra-op thread count per rank (1 keeps results
    bit-identical from run to run). Raises :class:`WorkerError` if a rank raises or dies
    (the others are stopped at once), :class:`WorkerTimeout` if the ranks have not all
    finished after ``timeout`` s. See :func:`run_outcomes` when a rank is meant to die. ``untrusted``: the ranks
    run code the caller does not trust; their results are read as plain data only (:mod:`labkit.dist.results`).
    """
    with _group(fn, world_size, timeout, threads, seed, kwargs, untrusted) as (procs, workdir):
        diagnose.wait_started(workdir, procs)
        deadline = time.monotonic() + timeout
        pending, reports, seals = {p.sentinel: r for r, p in enumerate(procs)}, {}, {}
        while pending:
            left = deadline - time.monotonic()
            if left <= 0:
                _timed_out(procs, sorted(pending.values()), workdir, timeout)
            for sentinel in wait(list(pending), timeout=left):
                rank = pending.pop(sentinel)
                procs[rank].join(timeout=5)  # reap it, so its exit code is known
                reports[rank], seals[rank] = results.read_sealed(workdir / f"rank{rank}.pkl", untrusted)
                if reports[rank][0] != "ok":  # raised, or exited unreported
                    _wait_all(procs, FAILURE_GRACE_S)  # let the others report what they saw
                    _raise_first_failure(workdir, procs, untrusted)
        for r in range(world_size) if untrusted else ():  # a rank's code may rewrite a peer's report after it exits
            if results.seal(workdir / f"rank{r}.pkl") != seals[r]:
                raise WorkerError(r, "its report was rewritten after it exited (another rank's code wrote it)", "")
        return [reports[r][1] for r in range(world_size)]


@dataclass(frozen=True)
class RankOutcome:
    """How one rank of :func:`run_outcomes` ended: ``status`` is ``"ok"`` (``result`` is what ``fn``
    returned), ``"raised"`` (``error``, ``remote_traceback``) or ``"died"`` (killed, or exited without
    reporting). ``exit_code`` is the process's: 0, 1 after a raise, -9 after a SIGKILL."""

    rank: int
    status: str
    exit_code: int
    result: Any = None
    error: str = ""
    remote_traceback: str = ""


def run_outcomes(fn: Callable[..., Any], world_size: int, *, timeout: float = 60.0, threads: int = 1, seed: int = 0,
                 **kwargs: Any) -> list[RankOutcome]:
    """Like :func:`run`, but a rank that fails does not stop the others: each runs until it exits.

    For fault-tolerance experiments where a rank dies on purpose and its peers are expected to
    carry on (``run`` stops the whole group at the first failure, right for everything else).
    Returns every rank's :class:`RankOutcome` in rank order; raises nothing for a failed rank,
    only :class:`WorkerTimeout` if some rank is still running after ``timeout`` s (then killed).
    """
    with _group(fn, world_size, timeout, threads, seed, kwargs) as (procs, workdir):
        diagnose.wait_started(workdir, procs)
        _wait_all(procs, timeout)
        alive = [r for r, p in enumerate(procs) if p.is_alive()]
        if alive:
            _timed_out(procs, alive, workdir, timeout)
        return [_outcome(workdir, r, int(p.exitcode)) for r, p in enumerate(procs)]


def _outcome(workdir: Path, rank: int, code: int) -> RankOutcome:
    status, *rest = results.read(workdir / f"rank{rank}.pkl")
    if status == "error":
        return RankOutcome(rank, "raised", code, None, rest[0], rest[1])
    died = RankOutcome(rank, "died", code, None, f"exited with code {code} before reporting a result")
    return RankOutcome(rank, "ok", code, rest[0]) if status == "ok" else died


def _timed_out(procs: list, ranks: list[int], workdir: Path, timeout: float) -> None:
    """Find where each unfinished rank is (before they are killed), then raise naming the culprit."""
    raise WorkerTimeout(ranks, timeout, diagnose.where({r: procs[r].pid for r in ranks}, workdir))


def _wait_all(procs: list, seconds: float) -> None:
    """Wait until every rank has exited, or ``seconds`` have passed."""
    deadline = time.monotonic() + seconds
    for p in procs:
        p.join(timeout=max(0.0, deadline - time.monotonic()))


def _raise_first_failure(workdir: Path, procs: list, untrusted: bool = False) -> None:
    """Raise for the rank that failed first: the others usually fail *because* it did.

    When one rank raises, its peers see a closed connection a moment later; the
    error a learner needs is the first one, so failures are ordered by time.
    """
    failures = []
    for rank, p in enumerate(procs):
        status, *rest = results.read(workdir / f"rank{rank}.pkl", untrusted)
        if status == "error":
            failures.append((rest[2], rank, rest[0], rest[1]))
        elif status != "ok" and p.exitcode is not None:  # exited (even with 0) before reporting
            failures.append((0.0, rank, f"exited with code {p.exitcode} before reporting a result", ""))
    if not failures:
        raise WorkerError(-1, "a rank stopped without reporting a result", "")
    _, rank, message, remote = min(failures)
    raise WorkerError(rank, message, remote)


from labkit.dist.torchrun import main_under_torchrun  # noqa: E402, F401 - the same fn under torchrun
from labkit.dist.workers import all_reduce_demo, faulty_worker  # noqa: E402, F401 - the demo workers
