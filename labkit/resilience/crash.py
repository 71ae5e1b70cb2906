"""Real crashes: a training process is SIGKILLed, restarted, and must end bit-identical to one never killed.

Each experiment runs :mod:`labkit.resilience.worker` in a child process, lets it die by
``SIGKILL`` at a chosen point (during a step, or during a checkpoint write), starts it again
on the same directory, and compares its per-step losses and final state digests with an
uninterrupted run. The child's event log says how much was lost: the steps done after the
checkpoint it resumed from, and their wall-clock seconds.

Children start from a ``forkserver`` that has already imported torch and built a Trainer
(``labkit.resilience.preload``; a fresh interpreter costs seconds on a small machine), yet
each is a real process with its own memory; ``launcher="subprocess"`` runs the real
command line ``python -m labkit.resilience.worker`` instead. :func:`crash_group` does the
same to one rank of a 2-rank gloo group launched with ``labkit.dist.run``: the survivor
fails inside its collective, the launcher stops the group within its timeout, and the
restarted group resumes.

Results split into what a notebook may check (:class:`CrashOutcome`: steps lost, flags,
rejections) and wall-clock figures (:class:`CrashTiming`), which are shown, never asserted.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

from labkit import dist as ldist
from labkit.errors import LabkitError, require_choice, require_positive
from labkit.predict.tables import text_table
from labkit.resilience import worker
from labkit.resilience.manifest import TMP_SUFFIX

LAUNCHERS = ("forkserver", "subprocess")


@dataclass(frozen=True, order=True)
class KillPoint:
    """Where the process dies: during step ``step``, or while writing the checkpoint of step ``step``."""

    step: int
    phase: str = "step"


@dataclass(frozen=True)
class CrashOutcome:
    """The checkable part: did it die, where did it resume, what was lost, did every bit come back."""

    kill: KillPoint
    killed: bool
    resumed_from: int
    steps_lost: int
    rejected: tuple[tuple[str, str], ...]
    losses_identical: bool
    params_identical: bool
    state_identical: bool
    tmp_cleaned: bool

    @property
    def ok(self) -> bool:
        return self.killed and self.losses_identical and self.params_identical and self.state_identical


@dataclass(frozen=True)
class CrashTiming:
    """Wall clock (shown only): seconds of lost work, and from the kill to the resumed process being ready."""

    seconds_lost: float
    restart_s: float


@dataclass(frozen=True)
class Reference:
    """An uninterrupted run: exact losses (hex floats) and final digests."""

    losses: tuple[str, ...]
    params: str
    state: str


KILLERS = ("self", "parent")


def _trigger(kill: KillPoint, new_events: list[dict]) -> bool:
    """Whether the child has reached ``kill``, seen from outside through its event log."""
    if kill.phase == "step":
        return any(e["event"] == ("resume" if kill.step == 0 else "step") and e["step"] == max(kill.step - 1, 0)
                   for e in new_events)  # fmt: skip
    return any(e["event"] == "saving" and e["step"] == kill.step for e in new_events)


def launch_worker(root: str | Path, steps: int, every: int, *, seed: int = 0, kill: KillPoint | None = None,
                  launcher: str = "forkserver", killer: str = "self", timeout: float = 60.0) -> int:
    """Run one worker process to its end or its death; returns its exit code (``-9``: SIGKILL).

    ``killer="self"``: the child kills itself exactly at ``kill``. ``killer="parent"``: this
    process follows the child's event log and sends the SIGKILL when it sees the child reach
    ``kill``; where it lands (a step later, mid-write) is up to the scheduler.
    """
    require_choice("launcher", launcher, LAUNCHERS)
    require_choice("killer", killer, KILLERS)
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    log = worker.events_path(root)
    seen = log.stat().st_size if log.exists() else 0
    argv = ["--dir", str(root), "--steps", str(steps), "--every", str(every), "--seed", str(seed)]
    if kill is not None and killer == "self":
        argv += ["--kill-step", str(kill.step), "--kill-phase", kill.phase]
    if launcher == "subprocess":
        errors = tempfile.TemporaryFile(mode="w+")  # a file, not a pipe: a chatty child can never block on it
        proc = subprocess.Popen([sys.executable, "-m", "labkit.resilience.worker", *argv], stderr=errors,
                                stdout=subprocess.DEVNULL, text=True)  # fmt: skip
        pid, alive, code = proc.pid, lambda: proc.poll() is None, lambda: proc.returncode
    else:
        ctx = mp.get_context("forkserver")
        ctx.set_forkserver_preload(["labkit.resilience.preload"])
        proc = ctx.Process(target=worker.main, args=(argv,), daemon=True)
        proc.start()
        pid, alive, code = proc.pid, proc.is_alive, lambda: proc.exitcode
    deadline, armed = time.monotonic() + timeout, kill is not None and killer == "parent"
    while alive() and time.monotonic() < deadline:
        if armed and log.exists():
            with open(log) as f:
                f.seek(seen)
                lines = f.read().splitlines()
            if _trigger(kill, worker.parse_events(lines)):
                os.kill(pid, signal.SIGKILL)
                armed = False
        time.sleep(0.001 if armed else 0.01)
    if alive():
        os.kill(pid, signal.SIGKILL)
    proc.wait() if launcher == "subprocess" else proc.join()
    if time.monotonic() >= deadline:
        raise LabkitError(f"worker did not finish within {timeout:g} s and was killed")
    err = ""
    if launcher == "subprocess":
        errors.seek(0)
        err = errors.read()[-1500:]
        errors.close()
    if code() not in (0, -signal.SIGKILL):
        raise LabkitError(f"worker failed with exit code {code()} {err}")
    return code()


def _summary(events: list[dict]) -> tuple[dict[int, list[str]], dict | None]:
    losses: dict[int, list[str]] = {}
    for e in events:
        if e["event"] == "step":
            losses.setdefault(e["step"], []).append(e["loss"])
    done = [e for e in events if e["event"] == "done"]
    return losses, (done[-1] if done else None)


def reference_run(root: str | Path, steps: int, every: int, seed: int = 0, launcher: str = "forkserver",
                  timeout: float = 60.0) -> Reference:
    """The uninterrupted run every crash is compared with (same process kind, same settings)."""
    require_choice("launcher", launcher, LAUNCHERS)
    root = Path(root)
    launch_worker(root, steps, every, seed=seed, launcher=launcher, timeout=timeout)
    return _reference_from(root, steps)


def _reference_from(root: Path, steps: int, rank: int = 0) -> Reference:
    losses, done = _summary(worker.read_events(root, rank))
    if done is None or len(losses) != steps:
        raise LabkitError(f"the reference run in {root} did not finish its {steps} steps")
    return Reference(tuple(losses[i][-1] for i in range(steps)), done["params"], done["state"])


def judge(root: Path, ref: Reference, kill: KillPoint, killed: bool, t_kill: float,
          rank: int = 0) -> tuple[CrashOutcome, CrashTiming]:
    """Read the killed and the resumed run's events in ``root`` and compare them with ``ref``."""
    events = worker.read_events(root, rank)
    resumes = [i for i, e in enumerate(events) if e["event"] == "resume"]
    first, again = events[: resumes[-1]], events[resumes[-1]:]
    start = again[0]["step"]
    done_before = [e["step"] + 1 for e in first if e["event"] == "step"]
    lost = (max(done_before) if done_before else 0) - start
    saved_at = [e["t"] for e in first if e["event"] in ("save", "resume") and e["step"] == start]
    losses, done = _summary(events)
    steps = len(ref.losses)
    same = all(len(set(losses.get(i, []))) == 1 and losses[i][-1] == ref.losses[i] for i in range(steps))
    outcome = CrashOutcome(
        kill, killed, start, lost, tuple(tuple(r) for r in again[0]["rejected"]), same,
        done is not None and done["params"] == ref.params, done is not None and done["state"] == ref.state,
        not any(p.name.endswith(TMP_SUFFIX) for p in root.iterdir()),
    )  # fmt: skip
    timing = CrashTiming(t_kill - (saved_at[-1] if saved_at else t_kill), again[0]["t"] - t_kill)
    return outcome, timing


def crash_and_resume(root: str | Path, ref: Reference, kill: KillPoint, every: int, seed: int = 0,
                     launcher: str = "forkserver", killer: str = "self",
                     timeout: float = 60.0) -> tuple[CrashOutcome, CrashTiming]:
    """Kill a fresh run at ``kill`` (see :func:`launch_worker`), restart it on the same directory, judge it."""
    require_choice("launcher", launcher, LAUNCHERS)
    require_choice("kill.phase", kill.phase, worker.KILL_PHASES)
    steps = len(ref.losses)
    if not 0 <= kill.step <= steps:
        raise LabkitError(f"kill.step must be in 0..{steps} (got {kill.step})")
    root = Path(root)
    code = launch_worker(root, steps, every, seed=seed, kill=kill, launcher=launcher, killer=killer, timeout=timeout)
    t_kill = time.time()
    launch_worker(root, steps, every, seed=seed, launcher=launcher, timeout=timeout)
    return judge(root, ref, kill, code == -signal.SIGKILL, t_kill)


def kill_points(n: int, steps: int, every: int, seed: int = 0) -> tuple[KillPoint, ...]:
    """``n`` distinct random kill points (seeded), during steps and during checkpoint writes."""
    require_positive("n", n)
    saves = sorted({s for s in range(every, steps + 1, every)} | {steps})
    pool = [KillPoint(s) for s in range(steps)] + [KillPoint(s, ph) for s in saves for ph in ("written", "manifest")]
    if n > len(pool):
        raise LabkitError(f"n must be at most {len(pool)} for {steps} steps saved every {every} (got {n})")
    return tuple(sorted(random.Random(seed).sample(pool, n)))


@dataclass(frozen=True)
class Sweep:
    """Kills at many points: each outcome (checkable) and its timing (shown only)."""

    outcomes: tuple[CrashOutcome, ...]
    timings: tuple[CrashTiming, ...]

    @property
    def all_ok(self) -> bool:
        return all(o.ok for o in self.outcomes)

    def table(self) -> str:
        """The checkable columns, one row per kill (identical on every run)."""
        rows = [[f"{o.kill.phase} @ {o.kill.step}", "yes" if o.killed else "no", o.resumed_from, o.steps_lost,
                 len(o.rejected), "yes" if o.ok else "NO"] for o in self.outcomes]  # fmt: skip
        return text_table(["kill point", "SIGKILL", "resumed from", "steps lost", "rejected", "bit-identical"], rows)

    def timing_table(self) -> str:
        """Wall-clock columns (differ run to run): seconds of lost work and of restart."""
        rows = [[f"{o.kill.phase} @ {o.kill.step}", f"{t.seconds_lost:.3f}", f"{t.restart_s:.3f}"]
                for o, t in zip(self.outcomes, self.timings, strict=True)]  # fmt: skip
        return text_table(["kill point", "lost work, s", "restart, s"], rows)


def kill_sweep(root: str | Path, n: int = 10, steps: int = 8, every: int = 2, seed: int = 0,
               launcher: str = "forkserver") -> Sweep:
    """Kill ``n`` runs at seeded random points; every one must resume and end bit-identical."""
    root = Path(root)
    ref = reference_run(root / "reference", steps, every, seed, launcher)
    results = [crash_and_resume(root / f"kill_{k.phase}_{k.step}", ref, k, every, seed, launcher)
               for k in kill_points(n, steps, every, seed)]  # fmt: skip
    return Sweep(tuple(o for o, _ in results), tuple(t for _, t in results))


@dataclass(frozen=True)
class GroupCrash:
    """One rank of a gloo group SIGKILLed: how the group failed, and the resumed run's outcome."""

    failed_rank: int
    failure: str
    failed_cleanly: bool  # the launcher reported the dead rank; no survivor had to be timed out
    outcome: CrashOutcome
    timing: CrashTiming


def crash_group(root: str | Path, steps: int = 6, every: int = 2, kill: KillPoint = KillPoint(3), kill_rank: int = 1,
                world: int = 2, seed: int = 0, timeout: float = 120.0) -> GroupCrash:
    """Kill ``kill_rank`` of a ``world``-rank group; the group fails cleanly, restarts, resumes bit-identical.

    The first group trains the uninterrupted reference, then starts the run that is killed;
    a second group resumes it. Save-phase kills happen on rank 0 (the rank that commits);
    step kills on ``kill_rank``. ``timeout`` bounds each group (and its collectives).
    """
    require_choice("kill_rank", kill_rank, range(world))
    require_choice("kill.phase", kill.phase, worker.KILL_PHASES)
    root, args = Path(root), dict(steps=steps, every=every, seed=seed)
    run_dir = root / "killed"
    rank = kill_rank if kill.phase == "step" else 0
    try:
        ldist.run(worker.group_worker, world, timeout=timeout, root=str(run_dir), kill_rank=rank, kill_step=kill.step,
                  kill_phase=kill.phase, reference_root=str(root / "reference"), **args)  # fmt: skip
        failed, failure, clean = -1, "the group finished: the kill point was never reached", False
    except ldist.WorkerError as err:  # a rank died and the launcher stopped the rest: a clean failure
        failed, failure, clean = err.rank, str(err), True
    except ldist.WorkerTimeout as err:  # a survivor hung until the deadline: not clean
        failed, failure, clean = -1, str(err), False
    t_fail = time.time()  # the failure as the launcher saw it: detection is part of the lost time
    ldist.run(worker.group_worker, world, timeout=timeout, root=str(run_dir), **args)
    refs = [_reference_from(root / "reference", steps, r) for r in range(world)]
    judged = [judge(run_dir, refs[r], kill, failed == rank, t_fail, r) for r in range(world)]
    outcome, timing = judged[0]
    others = [o for o, _ in judged[1:]]
    outcome = replace(outcome, params_identical=all(o.params_identical for o in [outcome, *others]),
                      state_identical=all(o.state_identical for o in [outcome, *others]),
                      losses_identical=all(o.losses_identical for o in [outcome, *others]))
    return GroupCrash(failed, failure, clean, outcome, timing)
