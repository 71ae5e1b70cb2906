"""Watching a sandbox from outside: its processes, their memory, its work folder; and ending it for good.

A sandbox's processes are those of its pid namespace, found from the host's ``/proc`` (each process's
``/proc/PID/ns/pid`` link names its namespace), whatever they did to hide: a ``setsid`` daemon is still in
the namespace. :class:`Watchdog` polls them: more processes than allowed (where ``RLIMIT_NPROC`` cannot hold,
see :mod:`labkit.course.sandbox.bwrap`), more resident memory in all of them together than allowed (an
``RLIMIT_AS`` per process cannot bound the sum), or more bytes or files in the work folder, and it kills the
sandbox and says why. Killing the namespace's first process makes the kernel kill every other one.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path

from labkit.course.sandbox.bwrap import Limits

PAGE = os.sysconf("SC_PAGE_SIZE")
POLL_S = 0.05
SLACK = 8  # processes beyond RLIMIT_NPROC's count: bwrap's own, and a margin so the rlimit, where it holds, acts first


def members(ns: str) -> list[int]:
    """Host pids of the processes in pid namespace ``ns`` (a ``pid:[inode]`` link text)."""
    pids = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                if os.readlink(f"/proc/{entry.name}/ns/pid") == ns and not _zombie(entry.name):
                    pids.append(int(entry.name))
            except OSError:  # gone, or not ours to read
                pass
    return pids


def _zombie(pid: str) -> bool:
    """A process that has exited and waits to be reaped: it holds no memory and runs nothing."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except (OSError, IndexError):
        return True


def session_members(sid: int) -> list[int]:
    """Host pids of session ``sid`` (the unsandboxed fallback has no namespace of its own)."""
    pids = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                fields = Path(f"/proc/{entry.name}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[3]) == sid and fields[0] not in ("Z", "X"):  # field 6 of stat: the session id
                pids.append(int(entry.name))
    return pids


def resident_bytes(pids: list[int]) -> int:
    total = 0
    for pid in pids:
        try:
            total += int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE
        except (OSError, IndexError, ValueError):
            pass
    return total


def folder_usage(folder: Path, max_files: int) -> tuple[int, int]:
    """(bytes on disk, files) under ``folder``, counting at most ``max_files + 1`` files."""
    used, count = 0, 0
    for root, dirs, files in os.walk(folder):
        for name in files + dirs:
            count += 1
            try:
                st = os.lstat(os.path.join(root, name))
                used += max(st.st_size, st.st_blocks * 512)  # written but not yet allocated counts too
            except OSError:
                pass
            if count > max_files:
                return used, count
    return used, count


def kill_all(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


class Watchdog(threading.Thread):
    """Polls one sandbox until :meth:`stop`; on a breach calls ``kill`` once and keeps the reason."""

    def __init__(self, find: Callable[[], list[int]], work: Path, limits: Limits, kill: Callable[[], None]) -> None:
        super().__init__(daemon=True, name="labkit-sandbox-watchdog")
        self.find, self.work, self.limits, self.kill = find, work, limits, kill
        self.reason: str | None = None
        self.peak_bytes = 0
        self.peak_processes = 0
        self._stop = threading.Event()

    def run(self) -> None:
        tick = 0
        while not self._stop.wait(POLL_S):
            pids = self.find()
            rss = resident_bytes(pids)
            self.peak_bytes, self.peak_processes = max(self.peak_bytes, rss), max(self.peak_processes, len(pids))
            lim = self.limits
            if len(pids) > lim.processes + SLACK:
                self._breach(f"it ran {len(pids)} processes at once (the limit is {lim.processes})")
            elif rss > lim.memory_bytes:
                self._breach(f"its processes held {rss / 2**30:.2f} GiB of memory together (the limit is "
                             f"{lim.memory_bytes / 2**30:.2f} GiB)")
            elif tick % 2 == 0:
                used, files = folder_usage(self.work, lim.files)
                if used > lim.disk_bytes or files > lim.files:
                    self._breach(f"it wrote {used / 2**20:,.0f} MiB in {files:,} files (the limits are "
                                 f"{lim.disk_bytes / 2**20:,.0f} MiB and {lim.files:,} files)")
            tick += 1

    def _breach(self, why: str) -> None:
        if self.reason is None:
            self.reason = why
            self.kill()
        self._stop.set()

    def stop(self) -> None:
        self._stop.set()


def wait_gone(find: Callable[[], list[int]], seconds: float = 5.0) -> list[int]:
    """Kill what ``find`` returns until nothing is left (or ``seconds`` pass); what is left."""
    deadline = time.monotonic() + seconds
    left = find()
    while left and time.monotonic() < deadline:
        kill_all(left)
        time.sleep(0.02)
        left = find()
    return left
