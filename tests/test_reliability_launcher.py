"""The launcher names the culprit: the rank that exited without reporting, the rank that hung (issue 24)."""

from __future__ import annotations

import time

import pytest

from labkit import dist
from labkit.dist import diagnose


@pytest.mark.parametrize("bad_rank", [0, 1])
def test_a_rank_that_exits_0_without_reporting_is_named_with_its_exit_code(bad_rank):
    t0 = time.monotonic()
    with pytest.raises(dist.WorkerError, match=rf"^rank {bad_rank} failed: exited with code 0 before reporting") as err:
        dist.run(dist.faulty_worker, 2, timeout=60, bad_rank=bad_rank, mode="quiet")
    assert err.value.rank == bad_rank and time.monotonic() - t0 < 30


def test_run_outcomes_reports_the_quiet_rank_as_died():
    out = dist.run_outcomes(dist.faulty_worker, 2, timeout=60, bad_rank=1, mode="quiet")
    assert (out[1].status, out[1].exit_code) == ("died", 0)
    assert out[1].error == "exited with code 0 before reporting a result"


@pytest.mark.parametrize("bad_rank", [0, 1])
def test_a_hang_names_the_rank_that_did_not_reach_the_collective(bad_rank):
    t0 = time.monotonic()
    with pytest.raises(dist.WorkerTimeout) as err:
        dist.run(dist.faulty_worker, 2, timeout=15, bad_rank=bad_rank, mode="hang")  # the 2 cores are shared
    assert time.monotonic() - t0 < 35
    other = 1 - bad_rank
    assert err.value.culprits == [bad_rank] and err.value.ranks == [0, 1]
    assert str(err.value).startswith(f"rank {bad_rank} (in faulty_worker (workers.py:")
    assert f"rank {other} waited for it in barrier" in str(err.value)


def test_a_stack_dump_is_read_as_in_a_collective_or_not():
    waiting = '''Thread 0x01 (most recent call first):
  File "/v/site-packages/torch/distributed/distributed_c10d.py", line 4810 in barrier
  File "/v/site-packages/torch/distributed/c10d_logger.py", line 81 in wrapper
  File "/w/labkit/dist/workers.py", line 33 in faulty_worker
  File "/w/labkit/dist/__init__.py", line 107 in _worker
'''
    stuck = '''Current thread 0x02 (most recent call first):
  File "/w/labkit/dist/workers.py", line 28 in faulty_worker
  File "/w/labkit/dist/__init__.py", line 107 in _worker
'''
    assert diagnose.parse(0, waiting) == diagnose.Where(0, "barrier", "faulty_worker (workers.py:33)")
    assert diagnose.parse(1, stuck) == diagnose.Where(1, None, "faulty_worker (workers.py:28)")
    msg = diagnose.hang_message([0, 1], 5, [diagnose.parse(0, waiting), diagnose.parse(1, stuck)])
    assert msg == ("rank 1 (in faulty_worker (workers.py:28)) did not reach the collective within 5 s: "
                   "rank 0 waited for it in barrier; every rank was killed")
    assert diagnose.hang_message([0, 1], 5, []) == "rank 0, 1 did not finish within 5 s and was killed"
    msg = diagnose.hang_message([0, 1], 5, [diagnose.parse(0, waiting)])
    assert msg.startswith("rank 1 (in no stack: not started) did not reach the collective")
