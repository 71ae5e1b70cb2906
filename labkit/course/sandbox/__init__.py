"""Re-run submitted code in a sandbox, and judge it where the submitted code cannot reach: collect's only code runner.

``run_submissions(items)`` re-runs each item (``{"key", "function", "source"}``: a coding answer's function,
or a build-it module) in a bubblewrap sandbox of its own (:mod:`labkit.course.sandbox.bwrap`): a read-only view
of Python, the venv and labkit, a private work folder, no network but its own loopback, limits on processes,
memory, disk and time, every process killed at the end (:mod:`~labkit.course.sandbox.session`,
:mod:`~labkit.course.sandbox.watch`). The learner's code never runs in the process that decides its verdict: the
exercise's test runs here, on a proxy whose calls are answered by the sandboxed child as plain data
(:mod:`~labkit.course.sandbox.coding`, :mod:`~labkit.course.sandbox.build`, :mod:`~labkit.course.sandbox.channel`).

Where no sandbox works on this machine, nothing is re-run unless the caller passes ``unsafe=True`` (collect's
``--unsafe-rerun``): then the child is a plain process with the same rlimits and the same split of the verdict,
but with the instructor's view of the files and network, and daemons that may outlive it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from labkit.course.sandbox.bwrap import Limits, probe

__all__ = ["Limits", "Rerun", "available", "run_submissions"]


@dataclass(frozen=True)
class Rerun:
    """A submitted item's verdict when run again here: ok, or why not (a failed case, a timeout, no sandbox)."""

    key: str
    ok: bool | None  # None: it could not be run (no source, no sandbox, not re-gradable here)
    message: str


@dataclass(frozen=True)
class Cost:
    """What one item's re-run took: sandbox starts (seconds each), wall seconds, processes left after it, why a
    sandbox was stopped, where it ran (its work folder, its pid namespaces), and the most resident memory and
    processes the watchdog saw at once."""

    key: str
    starts: tuple[float, ...]
    wall_s: float
    leftovers: tuple[int, ...]
    stopped: tuple[str, ...]
    work: str = ""
    namespaces: tuple[str, ...] = ()
    peak_bytes: int = 0
    peak_processes: int = 0


COSTS: list[Cost] = []  # the last run_submissions call's, item by item (for tests and measurements)


def available() -> tuple[bool, str]:
    """Whether a sandbox works here, and why not when it does not."""
    mode, why = probe()
    return mode is not None, why


def run_submissions(items: list[dict], timeout_s: float = 120.0, *, unsafe: bool = False,
                    limits: Limits | None = None) -> list[Rerun]:
    """One :class:`Rerun` per item, in order; ``timeout_s`` bounds each item's calls into its sandbox.

    Never raises for what an item's code does: a crash, a hang, a forged or malformed reply, a breach of a
    limit is that item's failed verdict with its reason, and the next item runs in a fresh sandbox.
    """
    from labkit.course.sandbox.build import grade_build
    from labkit.course.sandbox.coding import grade_coding
    from labkit.course.sandbox.remote import Runner
    from labkit.course.sandbox.session import new_work, remove_work
    from labkit.practice import CODING
    from labkit.practice.build import BUILDS

    COSTS.clear()
    mode, why = probe()
    if mode is None and not unsafe:
        note = f"not re-run: no sandbox works on this machine ({why}); collect --unsafe-rerun runs it unsandboxed"
        return [Rerun(str(i.get("key")), None, note) for i in items]
    mode = mode or "unsafe"
    limits = limits or Limits(cpu_s=int(timeout_s) + 10)
    out = []
    for item in items:
        key, source = str(item.get("key")), item.get("source") or ""
        t0 = time.monotonic()
        work = new_work()
        runner = Runner(work, mode, limits, t0 + timeout_s, source, item.get("function"), f"<hand-in {key}>")
        try:
            if not isinstance(source, str) or not source.strip():
                ok, message = None, "no source in the hand-in"
            elif key in BUILDS:
                ok, message = grade_build(key, runner, source)
            elif key in CODING:
                ok, message = grade_coding(key, runner)
            else:
                ok, message = None, f"no such coding exercise in this labkit ({key!r})"
        except Exception as err:  # noqa: BLE001 - the grader's own failure on one item must not stop the class
            ok, message = False, f"the re-grade failed: {type(err).__name__}: {err}"
        finally:
            runner.kill()
            remove_work(work)
        if runner.stopped:
            message = f"{message}\n(the sandbox was stopped: {'; '.join(runner.stopped)})"
        out.append(Rerun(key, ok, message))
        COSTS.append(Cost(key, tuple(runner.starts), time.monotonic() - t0, tuple(runner.leftovers),
                          tuple(runner.stopped), str(work), tuple(runner.namespaces), runner.peak_bytes,
                          runner.peak_processes))
    return out
