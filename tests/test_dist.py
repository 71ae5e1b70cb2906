"""The local launcher: results back in rank order, failures and hangs reported, nothing left behind.

Cost: about 60 s on 2 cores (process groups; the hang tests wait out their timeouts; the killed launcher, one
subprocess that imports torch, about 6 s)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from labkit import dist
from labkit.errors import LabkitError

ROOT = Path(__file__).resolve().parent.parent


def _children() -> set[int]:
    """PIDs of this process's live rank processes: its own children and the forkserver's (labkit.dist.context),
    zombies, the forkserver itself and multiprocessing's resource tracker excluded."""
    procs = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                procs[int(entry.name)] = (int(fields[1]), fields[0], (entry / "cmdline").read_bytes())
            except OSError:
                continue
    me = os.getpid()
    servers = {pid for pid, (ppid, _, cmd) in procs.items() if ppid == me and b"forkserver" in cmd}
    return {pid for pid, (ppid, state, cmd) in procs.items()
            if state != "Z" and pid not in servers and b"resource_tracker" not in cmd
            and (ppid in servers or (ppid == me and b"spawn_main" in cmd))}


def test_the_rank_finder_sees_a_live_rank():
    """_children must be able to fail: a rank still running is found."""
    import threading

    found = []
    t = threading.Thread(target=lambda: found.append(_run_hang_briefly()))
    t.start()
    deadline = time.monotonic() + 60
    while not found and time.monotonic() < deadline and not _children():
        time.sleep(0.05)
    seen = bool(_children())
    t.join()
    assert seen and not _children()


def _run_hang_briefly() -> bool:
    with pytest.raises(dist.WorkerTimeout):
        dist.run(dist.faulty_worker, 2, timeout=3, bad_rank=1, mode="hang")
    return True


def test_all_reduce_on_two_and_four_ranks():
    for world in (2, 4):
        out = dist.run(dist.all_reduce_demo, world, numel=8)
        assert [r["rank"] for r in out] == list(range(world))
        assert all(r["sum"] == r["expected"] for r in out)
        assert len({r["pid"] for r in out}) == world
    assert not _children()


def test_a_raising_worker_is_named_with_its_traceback():
    t0 = time.monotonic()
    with pytest.raises(dist.WorkerError, match="rank 1 failed: ValueError: rank 1 was told to fail") as err:
        dist.run(dist.faulty_worker, 2, timeout=60, bad_rank=1, mode="raise")
    assert err.value.rank == 1 and "faulty_worker" in err.value.remote_traceback
    assert time.monotonic() - t0 < 30  # the healthy rank, stuck in a barrier, is killed at once
    assert not _children()


def test_a_hanging_worker_is_killed_after_the_timeout():
    t0 = time.monotonic()
    with pytest.raises(dist.WorkerTimeout, match=r"^rank 1 \(in faulty_worker \(workers.py:\d+\)\) did not reach the "
                       r"collective within 15 s: rank 0 waited for it in barrier") as err:
        dist.run(dist.faulty_worker, 2, timeout=15, bad_rank=1, mode="hang")  # time to start on 2 shared cores
    assert time.monotonic() - t0 >= 15  # waited out its timeout: not killed early (no upper bound: a loaded host)
    assert err.value.ranks == [0, 1] and err.value.culprits == [1]
    assert not _children()


def test_a_worker_that_dies_is_reported():
    with pytest.raises(dist.WorkerError, match="rank 0 failed: exited with code 3"):
        dist.run(dist.faulty_worker, 2, timeout=30, bad_rank=0, mode="die")
    assert not _children()


def test_bad_arguments_name_the_field():
    with pytest.raises(LabkitError, match="world_size must be a positive integer"):
        dist.run(dist.all_reduce_demo, 0)
    with pytest.raises(LabkitError, match="world_size must be at most 8"):
        dist.run(dist.all_reduce_demo, 9)
    with pytest.raises(LabkitError, match="fn must be a function of an importable module"):
        dist.run(lambda rank, world: rank, 2)


def test_same_function_runs_under_torchrun_on_loopback(torchrun):
    result = torchrun("labkit.dist")
    assert result["sum"] == 3.0 and result["expected"] == 3.0


def report_listeners(rank: int, world_size: int) -> list[str]:
    """(Runs in a rank.) Local addresses of this process's listening TCP sockets, as /proc writes them."""
    import torch
    import torch.distributed as tdist

    tdist.all_reduce(torch.ones(4))
    inodes = set()
    for fd in Path("/proc/self/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            cols = line.split()
            if cols[3] == "0A" and cols[9] in inodes:
                found.append(cols[1].split(":")[0])
    return found


LOOPBACK = {"0100007F", "00000000000000000000000001000000", "0000000000000000FFFF00000100007F"}


def test_every_rank_listens_on_loopback_only():
    for listeners in dist.run(report_listeners, 2):
        assert listeners and set(listeners) <= LOOPBACK, listeners


def test_an_interrupted_run_leaves_no_process_and_no_folder(tmp_path, monkeypatch):
    import tempfile
    import threading

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # dist.run's rendezvous folder goes here
    # A Jupyter kernel turns SIGINT into KeyboardInterrupt; a test process started in the background by a
    # non-interactive shell inherits SIGINT ignored, so install the kernel's behaviour for this test.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    t0 = time.monotonic()
    timer = threading.Timer(6.0, os.kill, (os.getpid(), signal.SIGINT))  # what the kernel's stop button sends
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            dist.run(dist.faulty_worker, 2, timeout=60, bad_rank=1, mode="hang")
    finally:
        timer.cancel()
        signal.signal(signal.SIGINT, previous)
    assert time.monotonic() - t0 < 30
    assert not _children()
    assert not list(tmp_path.glob("labkit-dist-*"))


def carry_on_without_peer(rank: int, world_size: int) -> str:
    """(Runs in a rank.) Rank 1 SIGKILLs itself after a barrier; rank 0 sees its receive fail and returns."""
    import torch
    import torch.distributed as tdist

    tdist.barrier()
    if rank == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    try:
        tdist.recv(torch.empty(1), 1)
    except RuntimeError as err:  # gloo: the peer's connection closed
        return f"carried on after: {type(err).__name__}"
    return "the dead peer answered"


def test_run_outcomes_lets_the_survivor_finish_and_reports_every_rank():
    t0 = time.monotonic()
    out = dist.run_outcomes(carry_on_without_peer, 2, timeout=30)
    assert time.monotonic() - t0 < 25  # the closed connection is seen at once, not at the timeout
    assert [o.rank for o in out] == [0, 1]
    assert (out[0].status, out[0].exit_code, out[0].result) == ("ok", 0, "carried on after: RuntimeError")
    assert (out[1].status, out[1].exit_code, out[1].result) == ("died", -9, None)
    assert out[1].error == "exited with code -9 before reporting a result"
    assert not _children()


def test_run_outcomes_returns_a_raised_error_and_checks_its_arguments():
    out = dist.run_outcomes(dist.faulty_worker, 2, timeout=30, bad_rank=1, mode="raise")
    assert (out[1].status, out[1].exit_code) == ("raised", 1)
    assert out[1].error == "ValueError: rank 1 was told to fail" and "faulty_worker" in out[1].remote_traceback
    assert out[0].status in ("raised", "died")  # its barrier lost the peer: how it ends is gloo's to say
    with pytest.raises(LabkitError, match="world_size must be at most 8"):
        dist.run_outcomes(dist.all_reduce_demo, 9)
    assert not _children()


def _proc_table() -> dict[int, tuple[int, str, str]]:
    """pid -> (parent pid, state, start time) of every process, from /proc."""
    table = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            table[int(entry.name)] = (int(fields[1]), fields[0], fields[19])
    return table


def _descendants(root: int) -> dict[int, str]:
    """Every live process below ``root`` (pid -> start time): its forkserver, resource tracker and ranks."""
    table, found = _proc_table(), {root}
    while grown := {p for p, (pp, _, _) in table.items() if pp in found and p not in found}:
        found |= grown
    return {p: table[p][2] for p in found - {root} if table[p][1] != "Z"}


def test_a_sigkilled_launcher_leaves_no_forkserver_tracker_or_rank():
    """The ranks' parent is the forkserver, which a SIGKILLed launcher left alive with its resource tracker and
    both ranks (still there 90 s later): each rank now watches the launcher (labkit.dist.lifeline)."""
    code = "from labkit import dist; dist.run(dist.faulty_worker, 2, timeout=600, bad_rank=1, mode='hang')"
    launcher = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT)
    try:
        deadline = time.monotonic() + 120
        while len(kids := _descendants(launcher.pid)) < 4 and time.monotonic() < deadline:  # server, tracker, 2 ranks
            time.sleep(0.1)
        assert len(kids) >= 4, kids
    finally:
        launcher.kill()
        launcher.wait()
    deadline = time.monotonic() + 20
    while (alive := {p for p, (_, st, t0) in _proc_table().items() if kids.get(p) == t0 and st != "Z"}) and (
            time.monotonic() < deadline):
        time.sleep(0.1)
    for pid in alive:  # leave nothing behind even when the test fails
        os.kill(pid, signal.SIGKILL)
    assert not alive, f"{len(alive)} of the launcher's {len(kids)} processes outlived it"
