"""A rank dies with its launcher, even when the launcher is SIGKILLed and the rank's parent is the forkserver.

``PR_SET_PDEATHSIG`` kills a process when its *parent* exits. A rank's parent is the forkserver
(:mod:`labkit.dist.context`), not the launcher, and the forkserver outlives a killed launcher for as
long as any rank lives: each rank holds the write end of the forkserver's "alive" pipe (CPython's
``multiprocessing.forkserver``), so the forkserver never sees EOF, and the resource tracker, whose pipe
the ranks hold too, never exits either. Measured here before this module: 90 s after a SIGKILL of a
launcher whose rank hung, the forkserver, the resource tracker and both ranks were still alive.

So each rank watches the launcher itself: a daemon thread waits on a pidfd of the launcher (Linux's
``pidfd_open``, readable once that process has exited) and SIGKILLs the rank. With the ranks gone,
the forkserver reads EOF and exits, and then the resource tracker does. Where there is no pidfd the
thread polls ``os.kill(pid, 0)`` (which cannot tell a zombie launcher from a live one, so there a
launcher must also be reaped by its own parent).
"""

from __future__ import annotations

import ctypes
import os
import select
import signal
import sys
import threading
import time

POLL_S = 0.5


def die_with_parent() -> None:
    """Ask Linux to SIGKILL this process when its parent exits (``PR_SET_PDEATHSIG``); a no-op elsewhere."""
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        except OSError:
            pass


def _wait_for_exit(pid: int) -> None:
    try:
        fd = os.pidfd_open(pid)
    except (AttributeError, OSError):  # no pidfd (macOS, old kernels), or the launcher is gone already
        while True:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return
            except PermissionError:
                pass
            time.sleep(POLL_S)
    try:
        select.select([fd], [], [])
    finally:
        os.close(fd)


def _watch(pid: int) -> None:
    _wait_for_exit(pid)
    os.kill(os.getpid(), signal.SIGKILL)


def die_with(launcher_pid: int) -> None:
    """In a rank: SIGKILL this process as soon as ``launcher_pid`` exits (a no-op for its own pid)."""
    if launcher_pid <= 0 or launcher_pid == os.getpid():
        return
    threading.Thread(target=_watch, args=(launcher_pid,), daemon=True, name="labkit-lifeline").start()
