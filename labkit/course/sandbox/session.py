"""One sandboxed child and the grader's end of its pipes: start it, ask it, watch it, end it and check that it ended.

A :class:`Session` starts ``python -m labkit.course.sandbox.child`` in a bubblewrap sandbox
(:mod:`labkit.course.sandbox.bwrap`), or, where the instructor allowed it (``unsafe=True``), as a plain child in
its own session with the same rlimits. The child gets the read end of the request pipe and the write end of the
reply pipe, nothing else of the grader's; its stdout and stderr go to a pipe of which the last
:data:`LOG_TAIL` characters are kept. :meth:`Session.close` kills the whole sandbox and then looks for any
process of it still alive (:attr:`Session.leftovers`, empty unless something escaped).
"""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from labkit.course.sandbox import bwrap, channel, watch
from labkit.course.sandbox.bwrap import Limits

LOG_TAIL = 4000
START_S = 30.0  # bwrap and Python start in about 0.1 s; a loaded machine may take far longer


class Session:
    """A running sandboxed child. ``mode``: ``"root"``, ``"userns"`` (bubblewrap) or ``"unsafe"`` (none)."""

    def __init__(self, work: Path, mode: str, limits: Limits) -> None:
        self.work, self.mode, self.limits = work, mode, limits
        self.seq = 0
        self.log = ""
        self.leftovers: list[int] = []
        self.uid = bwrap.child_uid() if mode == "root" else None
        self.started_s = 0.0
        self._closed = False
        t0 = time.monotonic()
        req_r, self._req = os.pipe()
        self._rep, rep_w = os.pipe()
        info_r, info_w = os.pipe()
        out_r, out_w = os.pipe()
        limits_arg = json.dumps({"cpu_s": limits.cpu_s, "address_bytes": limits.address_bytes,
                                 "processes": limits.processes, "file_bytes": limits.file_bytes})
        child = [sys.executable, "-m", "labkit.course.sandbox.child", "--limits", limits_arg,
                 "--fds", str(req_r), str(rep_w)]
        if self.uid is not None:
            child[3:3] = ["--drop", str(self.uid)]
            os.chown(work, self.uid, self.uid)
        env = bwrap.child_env(work)
        try:
            if mode == "unsafe":
                argv, keep = child, (req_r, rep_w)
            else:
                argv, keep = bwrap.command(mode, work, child, env, info_w), (req_r, rep_w, info_w)
            self.proc = subprocess.Popen(argv, pass_fds=keep, stdin=subprocess.DEVNULL, stdout=out_w,
                                         stderr=out_w, env=env, cwd=work, start_new_session=True)
        finally:
            for fd in (req_r, rep_w, info_w, out_w):
                os.close(fd)
        self._out = out_r
        os.set_blocking(self._req, False)
        threading.Thread(target=self._drain, daemon=True, name="labkit-sandbox-log").start()
        self.ns = None
        self.init_pid: int | None = None
        if mode == "unsafe":
            os.close(info_r)
            find = lambda: watch.session_members(self.proc.pid)  # noqa: E731
        else:
            self.init_pid = self._child_pid(info_r)
            try:
                self.ns = os.readlink(f"/proc/{self.init_pid}/ns/pid") if self.init_pid else None
            except OSError:  # it ended already: nothing of it to watch
                self.ns = None
            find = (lambda: watch.members(self.ns)) if self.ns else (lambda: [])  # noqa: E731
        self.find = find
        self.watchdog = watch.Watchdog(find, work, limits, self._kill)
        self.watchdog.start()
        self.started_s = time.monotonic() - t0

    def _child_pid(self, info_r: int) -> int | None:
        """bwrap writes ``{"child-pid": N}`` (the host pid of the namespace's first process) once it is set up."""
        data = b""
        deadline = time.monotonic() + START_S
        try:
            while b"}" not in data and time.monotonic() < deadline:
                if not select.select([info_r], [], [], max(0.0, deadline - time.monotonic()))[0]:
                    break
                chunk = os.read(info_r, 4096)
                if not chunk:
                    break
                data += chunk
        finally:
            os.close(info_r)
        try:
            return int(json.loads(data.decode())["child-pid"])
        except (ValueError, KeyError, TypeError):
            return None

    def _drain(self) -> None:
        while True:
            try:
                chunk = os.read(self._out, 65536)
            except OSError:
                return
            if not chunk:
                return
            self.log = (self.log + chunk.decode(errors="replace"))[-LOG_TAIL:]

    def alive(self) -> bool:
        return not self._closed and self.proc.poll() is None and self.watchdog.reason is None

    def send(self, message: dict, deadline: float) -> int:
        """Send one request; its number (the reply must carry it)."""
        self.seq += 1
        try:
            channel.send_request(self._req, {"seq": self.seq, **message}, deadline)
        except OSError as err:  # the child has gone: its end of the pipe is closed
            raise channel.ChannelError(f"the sandboxed process is not running ({self.ended()})") from err
        return self.seq

    def reply(self, seq: int, deadline: float) -> dict:
        try:
            return channel.read_reply(self._rep, seq, deadline)
        except channel.ChannelError as err:
            if isinstance(err, channel.Ended):  # let bwrap pass the exit code on, and the log its last lines
                try:
                    self.proc.wait(timeout=1.0)
                except subprocess.TimeoutExpired:
                    pass
                time.sleep(0.05)
            why = self.watchdog.reason
            raise type(err)(f"{err}; the sandbox was stopped: {why}" if why else f"{err} ({self.ended()})") from None

    def request(self, message: dict, deadline: float) -> dict:
        return self.reply(self.send(message, deadline), deadline)

    def ready(self) -> bool:
        """Whether a reply (or the end of the pipe) is waiting to be read."""
        return bool(select.select([self._rep], [], [], 0)[0])

    def ended(self) -> str:
        code = self.proc.poll()
        if code is None:
            return "still running"
        number = -code if code < 0 else code - 128 if code > 128 else 0  # bwrap passes 128 + signal on
        why = {signal.SIGXFSZ: f"it wrote a file over the limit of {self.limits.file_bytes / 2**20:,.0f} MiB",
               signal.SIGXCPU: f"it used more than {self.limits.cpu_s} s of CPU time",
               signal.SIGKILL: "it was killed"}.get(number)  # fmt: skip
        if why is None and number:
            why = f"it was killed by signal {number}"
        said = next((ln.strip() for ln in reversed(self.log.splitlines()) if ln.strip()), "")
        said = f"; its last words: {said[:200]!r}" if said else ""
        return (f"{why} (exit code {code})" if why else f"it exited with code {code}") + said

    def _kill(self) -> None:
        """SIGKILL the namespace's first process (the kernel then kills all of it; bwrap, its parent, reaps it
        and exits), or, without a namespace, the child's process group."""
        if self.init_pid:
            watch.kill_all([self.init_pid])
        else:  # no namespace: the process group, and whatever else is left of its session
            self._killpg()
            watch.kill_all(watch.session_members(self.proc.pid))

    def _killpg(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except OSError:
            pass

    def close(self) -> list[int]:
        """End the sandbox; the host pids of any of its processes still alive after that (none, normally)."""
        if self._closed:
            return self.leftovers
        self._closed = True
        self.watchdog.stop()
        self._kill()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self._killpg()
            self.proc.wait(timeout=5)
        self.leftovers = watch.wait_gone(self.find)
        for fd in (self._req, self._rep, self._out):
            try:
                os.close(fd)
            except OSError:
                pass
        return self.leftovers


def new_work() -> Path:
    """A fresh work folder, in a private (0700) parent under the system's temporary folder."""
    work = Path(tempfile.mkdtemp(prefix="labkit-sandbox-")) / "work"
    work.mkdir(mode=0o700)
    return work


def remove_work(work: Path) -> None:
    shutil.rmtree(work.parent, ignore_errors=True)
