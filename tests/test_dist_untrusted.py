"""``dist.run(..., untrusted=True)``: what a rank's code writes into its report file never runs in the launcher.

Each hostile rank below finds its report file the way any code in a rank can (the launcher's folder is where its
stack file lies) and writes into it. Cost: about 6 s on 2 cores (three 2-rank groups from the warm forkserver, one
of which waits 1.5 s on purpose).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
import torch

from labkit import dist
from labkit.dist import diagnose, results

pytestmark = pytest.mark.procs


class Touch:
    """Unpickling this creates ``path``: what a report could do to a launcher that unpickles it."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def _report(rank: int) -> Path:
    """(In a rank.) The path of ``rank``'s report, found from this rank's own stack file."""
    return Path(diagnose._open[0].name).with_name(f"rank{rank}.pkl")


def write_payload(rank: int, world_size: int, mark: str) -> int:
    """(Runs in a rank.) Rank 1 writes ("ok", <a pickle that creates ``mark``>) as its report and exits."""
    if rank == 1:
        torch.save(("ok", Touch(mark)), _report(1))
        os._exit(0)
    return rank


def write_oversized(rank: int, world_size: int) -> int:
    """(Runs in a rank.) Rank 1 leaves a report one byte over the bound (a sparse file) and exits."""
    if rank == 1:
        with open(_report(1), "wb") as f:
            f.truncate(results.MAX_UNTRUSTED_BYTES + 1)
        os._exit(0)
    return rank


def rewrite_peer(rank: int, world_size: int) -> str:
    """(Runs in a rank.) Rank 1 waits for rank 0 to exit and be read, then forges rank 0's report."""
    import torch.distributed as tdist

    pids: list = [None] * world_size
    tdist.all_gather_object(pids, os.getpid())
    if rank == 0:
        return "honest"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            os.kill(pids[0], 0)
        except ProcessLookupError:
            break
        time.sleep(0.02)
    time.sleep(1.5)  # the launcher reads a rank's report the moment it exits
    results.write(_report(0), ("ok", "forged"), untrusted=True)
    return "honest"


def test_the_payload_is_live_under_plain_unpickling(tmp_path):
    """So the next test can fail: torch.load without weights_only runs the report's payload."""
    buf = tmp_path / "report"
    torch.save(("ok", Touch(str(tmp_path / "mark"))), buf)
    torch.load(buf, weights_only=False)
    assert (tmp_path / "mark").exists()


def test_a_malicious_report_is_the_ranks_error_and_never_runs(tmp_path):
    mark = tmp_path / "mark"
    with pytest.raises(dist.WorkerError, match=r"^rank 1 failed: its report could not be read as plain data"):
        dist.run(write_payload, 2, timeout=60, untrusted=True, mark=str(mark))
    assert not mark.exists()


def test_an_oversized_report_is_refused_unread():
    with pytest.raises(dist.WorkerError, match=rf"^rank 1 failed: its report is {results.MAX_UNTRUSTED_BYTES + 1:,} "
                       r"bytes, over the limit"):
        dist.run(write_oversized, 2, timeout=60, untrusted=True)


def test_a_report_rewritten_by_a_peer_after_its_rank_exited_is_caught():
    with pytest.raises(dist.WorkerError, match=r"^rank 0 failed: its report was rewritten after it exited"):
        dist.run(rewrite_peer, 2, timeout=60, untrusted=True)
