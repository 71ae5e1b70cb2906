"""Which rank a hung group is waiting for: every unfinished rank's Python stack, dumped on request.

A collective blocks each rank that reached it until the last one arrives, so at a deadline every
rank is unfinished; the rank to blame is the one that is *not* inside a collective. Each rank arms
``faulthandler`` on ``SIGUSR1`` (it writes every thread's stack from the C signal handler, so it
works while the rank is blocked inside gloo, where a Python handler would never run); at the
deadline the launcher signals the unfinished ranks and reads where each one is. The same idea as
``torch.distributed.monitored_barrier``, which names the ranks that miss a barrier, but for a
rank stuck anywhere.
"""

from __future__ import annotations

import faulthandler
import os
import re
import signal
import time
from dataclasses import dataclass
from pathlib import Path

STACK_SIGNAL = getattr(signal, "SIGUSR1", None)  # absent on Windows: no diagnosis, the timeout still holds
_FRAME = re.compile(r'File "([^"]+)", line (\d+) in (\S+)')
_COLLECTIVES = ("distributed_c10d.py",)
_open: list = []  # the stack file must stay open for the signal handler


def arm(workdir: str | Path, rank: int) -> None:
    """In a rank: write this process's stacks to ``rank<r>.stack`` when it receives ``SIGUSR1``."""
    if STACK_SIGNAL is None:
        return
    f = open(Path(workdir) / f"rank{rank}.stack", "w")  # noqa: SIM115 - kept open for the handler
    _open.append(f)
    faulthandler.register(STACK_SIGNAL, file=f, all_threads=True)


START_LIMIT_S = 120.0  # how long ranks may take to start (spawn, import torch) before their timeout runs anyway


def wait_started(workdir: str | Path, procs: list, limit_s: float = START_LIMIT_S) -> None:
    """Wait until every rank has armed its stack dump (it has imported torch and is about to run), one has
    exited, or ``limit_s`` passed. A group's timeout counts from then: on a loaded machine spawning ranks
    can take longer than a short timeout, and a slow start must not be reported as a hang."""
    if STACK_SIGNAL is None:
        return
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if any(not p.is_alive() for p in procs) or all(
                (Path(workdir) / f"rank{r}.stack").exists() for r in range(len(procs))):
            return
        time.sleep(0.02)


@dataclass(frozen=True)
class Where:
    """Where an unfinished rank is: the collective it waits in (None if none) and its innermost own frame."""

    rank: int
    collective: str | None
    at: str


def parse(rank: int, text: str) -> Where:
    """Read a faulthandler dump (most recent call first): the collective, and the first frame outside torch."""
    blocks = [b for b in re.split(r"\n(?=\S)", text) if _FRAME.search(b)]
    main = next((b for b in blocks if "labkit/dist/__init__.py" in b), blocks[0] if blocks else "")
    frames = _FRAME.findall(main)
    collective = next((fn for path, _, fn in frames if path.endswith(_COLLECTIVES)), None)
    own = [(p, n, fn) for p, n, fn in frames if "/torch/" not in p and not p.endswith("labkit/dist/__init__.py")]
    path, line, fn = own[0] if own else (frames[0] if frames else ("?", "?", "?"))
    return Where(rank, collective, f"{fn} ({Path(path).name}:{line})")


def where(pids: dict[int, int], workdir: Path, wait_s: float = 10.0) -> list[Where]:
    """Signal each unfinished rank (rank -> pid) and read where it is; ranks whose dump never came are left out."""
    if STACK_SIGNAL is None:
        return []
    for pid in pids.values():
        try:
            os.kill(pid, STACK_SIGNAL)
        except OSError:
            pass
    deadline, found = time.monotonic() + wait_s, {}
    while len(found) < len(pids) and time.monotonic() < deadline:
        time.sleep(0.05)
        for rank in pids:
            path = workdir / f"rank{rank}.stack"
            text = path.read_text(errors="replace") if path.exists() else ""
            if rank not in found and _FRAME.search(text):
                time.sleep(0.05)  # let the handler finish writing
                found[rank] = parse(rank, path.read_text(errors="replace"))
    return [found[r] for r in sorted(found)]


def hang_message(ranks: list[int], timeout: float, wheres: list[Where]) -> str:
    """One line naming the rank that did not reach the collective the others wait in (or every unfinished rank)."""
    shown = ", ".join(str(r) for r in ranks)
    seen = {w.rank for w in wheres}
    if wheres:  # a rank that wrote no stack had not even started its function (or could not answer)
        wheres = sorted([*wheres, *(Where(r, None, "no stack: not started") for r in ranks if r not in seen)],
                        key=lambda w: w.rank)  # fmt: skip
    stuck = [w for w in wheres if w.collective is None]
    waiting = [w for w in wheres if w.collective is not None]
    if not stuck or not waiting:
        place = "; ".join(f"rank {w.rank} in {w.collective or w.at}" for w in wheres)
        return f"rank {shown} did not finish within {timeout:g} s and was killed" + (f" ({place})" if place else "")
    culprit = ", ".join(f"rank {w.rank} (in {w.at})" for w in stuck)
    waiters = ", ".join(str(w.rank) for w in waiting)
    colls = ", ".join(sorted({w.collective for w in waiting}))
    return (f"{culprit} did not reach the collective within {timeout:g} s: rank {waiters} waited for it "
            f"in {colls}; every rank was killed")
