"""The grader's side of a coding answer: the exercise's own test, run here, on a proxy of the learner's function.

:func:`grade_coding` defines the submitted source in a sandbox and runs ``labkit.practice.check_code(key,
proxy)`` in THIS process, so the test's expected values, its comparisons and its verdict never share a process
with the learner's code (which may replace ``check_code`` or anything else in its own process, to no effect).
What crosses, per exercise (all arguments are the test's own, pickled in; every value comes back plain):

* 01 state_bytes, 02 one_f_one_b, 04 choose_swaps, 05 update_scale, 07 footprint, 08 evict (a set and a list
  per call, about 200 calls), 09 states_per_gpu: numbers, strings, lists, sets in; dicts, lists, numbers back.
* 03 mlp_shards: weight tensors in, the pair of shard tensors back (``torch.load(weights_only=True)``).
* 06 atomic_save: the state dict of tensors and a path in the sandbox's work folder (the test's temporary
  folders are made there); the file is written by the learner's code and read here with ``weights_only``. Its
  kill-mid-write step (:func:`kill_mid_write`) runs the save in the sandbox and kills the whole sandbox, every
  process of the learner's code, once the bytes reach the disk; its fsync spy runs in the sandbox
  (:class:`RemoteSpy`) and reports the names of the calls it saw, which this side judges. Before the test reads
  a checkpoint here, the sandbox has ended and its folder holds files and folders only (:func:`only_files`).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from labkit.course.sandbox import channel
from labkit.course.sandbox.child import SPIED
from labkit.course.sandbox.remote import Remote, Runner, SourceError


@contextlib.contextmanager
def _grading_here(work: Path) -> Iterator[None]:
    """While a test runs here: no journal line, and its temporary folders inside the sandbox's work folder."""
    from labkit.teach import journal

    previous, previous_tmp = os.environ.get(journal.ENV), tempfile.tempdir
    os.environ[journal.ENV] = os.devnull
    tempfile.tempdir = str(work)
    try:
        yield
    finally:
        tempfile.tempdir = previous_tmp
        if previous is None:
            os.environ.pop(journal.ENV, None)
        else:
            os.environ[journal.ENV] = previous


def kill_mid_write(runner: Runner, fn: Remote, new: dict, path: Path, after_bytes: int,
                   timeout: float | None = None) -> str:
    """Notebook 06's kill step with the save in the sandbox: ``"killed"`` once ``after_bytes`` reached the
    folder (the whole sandbox is SIGKILLed), ``"finished before the kill"``, or ``"hung"``."""
    from labkit.practice import checkpoint as ck

    timeout = ck.TIME_LIMIT_S if timeout is None else timeout
    session = runner.live()
    runner.own_paths((path,), {})
    before = ck._folder_bytes(path.parent)
    seq = session.send({"op": "call", "args": (new, path), "kwargs": {}}, min(runner.deadline,
                                                                              time.monotonic() + timeout))
    deadline = time.monotonic() + timeout
    how = "hung"
    while time.monotonic() < deadline:
        if ck._folder_bytes(path.parent) - before >= after_bytes:
            how = "killed"
            break
        if session.ready():
            with contextlib.suppress(channel.ChannelError):
                session.reply(seq, time.monotonic() + 1.0)
            how = "finished before the kill"
            break
        time.sleep(0.0005)
    runner.kill()  # always: nothing of the learner's code outlives the step, as the forked child does not
    only_files(runner.work)
    return how


def only_files(work: Path) -> None:
    """With the sandbox ended: remove from its work folder anything but files and folders (a symlink to a key, a
    FIFO that would block the test's ``torch.load`` here), so what the test reads next is what was written."""
    import stat

    for root, dirs, files in os.walk(work):
        for name in dirs + files:
            p = os.path.join(root, name)
            with contextlib.suppress(OSError):
                mode = os.lstat(p).st_mode
                if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
                    os.unlink(p)


def remote_spy(runner: Runner) -> type:
    """notebook 06's ``_Spy``, watching the sandbox's os calls instead of this process's."""
    from labkit.practice import checkpoint as ck

    class RemoteSpy(ck._Spy):
        def __init__(self) -> None:
            self.calls: list[str] = []
            self._real = {}

        def __enter__(self) -> RemoteSpy:
            runner.request({"op": "spy", "on": True})
            return self

        def __exit__(self, *exc: object) -> None:
            session = runner.session
            if session is None or not session.alive():
                return
            calls = runner.request({"op": "spy", "on": False}).get("calls")
            self.calls = [c for c in calls if c in SPIED][:1000] if isinstance(calls, list) else []
            runner.kill()  # the test reads the checkpoint next: with nothing of the learner's code running
            only_files(runner.work)

    return RemoteSpy


@contextlib.contextmanager
def _checkpoint_seams(runner: Runner) -> Iterator[None]:
    """Point notebook 06's test at the sandbox for its two steps that need the learner's own process."""
    from labkit.practice import checkpoint as ck

    saved = ck._kill_mid_write, ck._Spy
    ck._kill_mid_write = lambda fn, new, path, after, timeout=ck.TIME_LIMIT_S: kill_mid_write(
        runner, fn, new, path, after, timeout)
    ck._Spy = remote_spy(runner)
    try:
        yield
    finally:
        ck._kill_mid_write, ck._Spy = saved


def grade_coding(key: str, runner: Runner) -> tuple[bool | None, str]:
    """(ok, message) of the submitted function of exercise ``key``: None when it cannot be run at all."""
    from labkit import practice

    try:
        runner.live()
    except SourceError as err:
        return (None if "no function" in str(err) else False), str(err)
    except channel.ChannelError as err:
        return False, f"the sandboxed process failed before the tests: {err}"
    proxy = Remote(runner, runner.function or "fn")
    seams = _checkpoint_seams(runner) if key == "06.code.atomic_save" else contextlib.nullcontext()
    try:
        with _grading_here(runner.work), seams:
            fb = practice.check_code(key, proxy)
    except (channel.ChannelError, SourceError) as err:
        return False, f"the sandboxed process failed: {err}"
    return fb.ok, str(fb)
