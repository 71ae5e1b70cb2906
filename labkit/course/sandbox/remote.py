"""The learner's function as the grader holds it: a proxy whose every call runs in the sandboxed child.

:class:`Runner` keeps one item's sandbox (:class:`labkit.course.sandbox.session.Session`), starts it when a
call needs it and the last one has ended (a call that timed out, a kill the grader made on purpose, code that
exited), and defines the submitted source in it each time. :class:`Remote` is what the exercise's test calls:
arguments go in, the value comes back as plain data, an exception raised there is raised here under the same
name (``NotImplementedError`` as itself, so a stub still reads "not written yet"), and a late, malformed or
doubled reply raises :class:`labkit.course.sandbox.channel.ChannelError`, which the test reports as that case
failing. Every call is bounded by the item's deadline.
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path
from typing import Any

from labkit.course.sandbox import channel
from labkit.course.sandbox.bwrap import Limits
from labkit.course.sandbox.session import Session

DEFINE_GRACE_S = 15.0  # the source's imports (torch, labkit) on a loaded machine: not the item's test time


class RemoteError(Exception):
    """What the learner's function raised in the sandbox, under its own type's name."""


_KINDS: dict[str, type] = {}


def remote_error(reply: dict) -> BaseException:
    name, message = str(reply.get("raised", "Exception")), str(reply.get("message", ""))[:2000]
    if name == "NotImplementedError":
        return NotImplementedError(message)
    name = name if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,59}", name) else "Exception"
    kind = _KINDS.setdefault(name, type(name, (RemoteError,), {"__module__": "sandbox"}))
    return kind(message)


class SourceError(Exception):
    """The submitted source could not be defined: it raised, or holds no function."""


class Runner:
    """One item's sandbox, started on demand, with the item's source defined in it."""

    def __init__(self, work: Path, mode: str, limits: Limits, deadline: float, source: str = "",
                 function: str | None = None, filename: str = "<hand-in>") -> None:
        self.work, self.mode, self.limits, self.deadline = work, mode, limits, deadline
        self.source, self.function, self.filename = source, function, filename
        self.session: Session | None = None
        self.starts: list[float] = []  # seconds from each start to the source defined in it
        self.leftovers: list[int] = []
        self.stopped: list[str] = []  # why the watchdog stopped a sandbox, if it did
        self.namespaces: list[str] = []  # each sandbox's pid namespace (for a test's look for survivors)
        self.broken: str | None = None  # why no further call can be answered
        self.peak_bytes, self.peak_processes = 0, 0  # the most any of its sandboxes held at once, as watched

    def live(self, define: bool = True) -> Session:
        """The running sandbox; a fresh one where the last was ended on purpose (never after a breach, a late
        or a malformed reply: those end the item's calls, each later call failing with the same reason)."""
        if self.session is not None and self.session.alive():
            return self.session
        if self.session is not None and self.session.watchdog.reason:
            self.broken = self.broken or f"the sandbox was stopped: {self.session.watchdog.reason}"
        self.kill()
        if self.broken:
            raise channel.ChannelError(self.broken)
        if time.monotonic() >= self.deadline:
            raise channel.ReplyTimeout("the item's time is up")
        t0 = time.monotonic()
        self.session = Session(self.work, self.mode, self.limits)
        if self.session.ns:
            self.namespaces.append(self.session.ns)
        if define:
            reply = self.session.request({"op": "define", "source": self.source, "function": self.function,
                                          "filename": self.filename}, max(self.deadline, t0 + DEFINE_GRACE_S))
            if "raised" in reply:
                raise SourceError(f"the submitted source raised {reply['raised']}: {reply.get('message', '')}"[:600])
            if reply.get("defined") is not True:
                raise SourceError("no function in the submitted source")
        self.starts.append(time.monotonic() - t0)  # bwrap, Python, and the source's own imports
        return self.session

    def request(self, message: dict, define: bool = True) -> dict:
        session = self.live(define)
        try:
            return session.request(message, self.deadline)
        except channel.ChannelError as err:
            self.broken = self.broken or f"an earlier call failed: {err}"
            self.kill()  # late or out of turn: nothing more it says can be matched to a request
            raise

    def call(self, args: tuple, kwargs: dict) -> Any:
        self.own_paths(args, kwargs)
        reply = self.request({"op": "call", "args": args, "kwargs": kwargs})
        if "raised" in reply:
            raise remote_error(reply)
        if "value" not in reply:
            self.broken = "a reply held no value"
            self.kill()
            raise channel.ChannelError(self.broken)
        return reply["value"]

    def own_paths(self, args: tuple, kwargs: dict) -> None:
        """Root mode: a folder the grader made in the work folder for a call's path argument (a checkpoint's
        folder) is handed to the sandbox's uid, which could not write in it otherwise."""
        if self.mode != "root":
            return
        uid = self.live().uid
        for arg in (*args, *kwargs.values()):
            if isinstance(arg, str | Path) and self.work in Path(arg).parents:
                for folder in Path(arg).parents:
                    if folder == self.work:
                        break
                    if folder.is_dir():
                        os.chown(folder, uid, uid)

    def kill(self) -> None:
        if self.session is not None:
            dog = self.session.watchdog
            self.peak_bytes, self.peak_processes = max(self.peak_bytes, dog.peak_bytes), max(self.peak_processes,
                                                                                              dog.peak_processes)
            if self.session.watchdog.reason:
                self.stopped.append(self.session.watchdog.reason)
            self.leftovers += self.session.close()
            self.session = None


class Remote:
    """The submitted function, called from the grader's side; it runs in the sandbox."""

    def __init__(self, runner: Runner, name: str = "fn") -> None:
        self.runner, self.__name__, self.__qualname__ = runner, name, name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.runner.call(args, kwargs)
