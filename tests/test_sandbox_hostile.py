"""Hostile hand-ins re-run by collect's sandbox: each fails with its reason, changes nothing outside its own
folder, leaves no process, and the honest items beside it keep their verdicts.

Real processes (bubblewrap sandboxes). One batch of sixteen items (``tests/hostile/*.py`` as answers to
notebook 09's coding exercise, whose test is instant) runs once for the module, about 12 s on 2 cores, most of
it the looping answer's 4 s limit; the user-namespace batch about 2 s; a whole collect of two hand-ins about
10 s (2.5 of it waiting for a daemon that must not come). Skipped where no sandbox works.
"""

from __future__ import annotations

import os
import random
import time
from pathlib import Path

import pytest

from labkit.course import sandbox
from labkit.course.sandbox import watch
from labkit.course.sandbox.bwrap import Limits

pytestmark = pytest.mark.procs
ROOT = Path(__file__).resolve().parent.parent
HOSTILE = ROOT / "tests" / "hostile"
KEY = "09.code.states_per_gpu"
LIMITS = Limits(cpu_s=30, processes=64, file_bytes=64 * 2**20, memory_bytes=2**30, disk_bytes=128 * 2**20,
                files=1000)
NAMES = ("loop_forever", "fork_bomb", "setsid_daemon", "allocate_20gb", "memory_hog", "write_outside", "read_key",
         "listen_all", "exit_early", "sys_exit", "patch_check_code", "fake_verdict", "malformed_reply", "big_file",
         "disk_fill")


@pytest.fixture(autouse=True, scope="module")
def _needs_a_sandbox():
    if not sandbox.available()[0]:  # probed here, not at collection: a quick run starts no process
        pytest.skip(f"no sandbox here: {sandbox.available()[1]}")


def honest() -> dict:
    import inspect
    import sys
    import textwrap

    sys.path.insert(0, str(ROOT))
    from instructor import key

    fn = key.REFERENCES[KEY]
    return {"key": KEY, "function": fn.__name__, "source": textwrap.dedent(inspect.getsource(fn))}


def survivors(costs: list) -> list[int]:
    """Processes still alive in any of the batch's pid namespaces, or started in one of its work folders."""
    found = [p for c in costs for ns in c.namespaces for p in watch.members(ns)]
    homes = [f"HOME={c.work}".encode() for c in costs]
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                env = Path(f"/proc/{entry.name}/environ").read_bytes().split(b"\0")
            except OSError:
                continue
            if any(h in env for h in homes):
                found.append(int(entry.name))
    return found


@pytest.fixture(scope="module")
def batch(tmp_path_factory):
    folder = tmp_path_factory.mktemp("course")
    (folder / "instructor").mkdir()
    (folder / "handins").mkdir()
    csv, other = folder / "instructor" / "class.csv", folder / "handins" / "bob.json"
    csv.write_text("student,coding_passed\nalice,1\n")
    other.write_text('{"student": "bob"}')
    port = random.randrange(40000, 50000)
    marks = {"@CLASS_CSV@": str(csv), "@OTHER_HANDIN@": str(other), "@KEY@": str(ROOT / "instructor" / "key.py"),
             "@BUILD_KEYS@": str(ROOT / "instructor" / "build"), "@PORT@": str(port)}
    items = [honest()]
    for name in NAMES:
        source = (HOSTILE / f"{name}.py").read_text()
        for mark, value in marks.items():
            source = source.replace(mark, value)
        items.append({"key": KEY, "function": "states_per_gpu", "source": source})
    items.append(honest())
    before = {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in (csv, other)}
    t0 = time.monotonic()
    got = sandbox.run_submissions(items, timeout_s=4, limits=LIMITS)
    wall = time.monotonic() - t0
    costs = list(sandbox.COSTS)
    time.sleep(2.5)  # the daemon's moment to rewrite the gradebook, had it survived
    return {"got": got, "by": dict(zip(("honest", *NAMES, "honest again"), got, strict=True)), "costs": costs,
            "before": before, "port": port, "wall": wall}


def test_one_verdict_per_item_in_order_and_the_honest_ones_pass(batch):
    assert [r.key for r in batch["got"]] == [KEY] * (len(NAMES) + 2)
    assert batch["by"]["honest"].ok is True and batch["by"]["honest again"].ok is True
    failing = {n: r for n, r in batch["by"].items() if not n.startswith("honest")}
    assert all(r.ok is not True for r in failing.values()), {n: r.message for n, r in failing.items() if r.ok}


@pytest.mark.parametrize(("name", "reason"), [
    ("loop_forever", "no reply within the time limit"),
    ("fork_bomb", "BlockingIOError"),
    ("allocate_20gb", "RuntimeError"),
    ("memory_hog", "GiB of memory together"),
    ("write_outside", "FileNotFoundError"),
    ("read_key", "FileNotFoundError"),
    ("listen_all", "interfaces ['lo']"),
    ("exit_early", "ended without replying"),
    ("sys_exit", "SystemExit"),
    ("patch_check_code", "tests fail"),
    ("fake_verdict", "(a reply written twice or forged)"),
    ("malformed_reply", "could not be read as plain data"),
    ("big_file", "File too large"),
    ("disk_fill", "MiB in"),
])
def test_each_hostile_item_fails_with_its_reason(batch, name, reason):
    r = batch["by"][name]
    assert r.ok is False and reason in r.message, r.message


def test_nothing_outside_its_folder_changed_and_no_process_is_left(batch):
    for path, (data, mtime) in batch["before"].items():
        assert path.read_bytes() == data and path.stat().st_mtime_ns == mtime, path
    assert not Path("/tmp/labkit-pwned").exists()
    assert all(not c.leftovers for c in batch["costs"]), [c.leftovers for c in batch["costs"]]
    assert survivors(batch["costs"]) == []
    assert "def states_per_gpu" not in batch["by"]["read_key"].message  # nothing of the key came back


def test_the_listener_was_only_inside_its_own_network(batch):
    port = f":{batch['port']:04X} ".encode()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        assert all(port not in line for line in Path(table).read_bytes().splitlines()[1:])


def test_a_sandbox_start_is_cheap(batch):
    starts = [s for c in batch["costs"] for s in c.starts]
    assert starts and sorted(starts)[len(starts) // 2] < 1.0, starts
    assert batch["wall"] < 60


def test_the_user_namespace_path_holds_too(monkeypatch):
    """bubblewrap's unprivileged path (as a non-root instructor gets it); as root the kernel exempts the mapped
    uid from RLIMIT_NPROC, so here the watchdog stops the fork bomb."""
    monkeypatch.setattr(sandbox, "probe", lambda: ("userns", ""))
    bomb = {"key": KEY, "function": "states_per_gpu", "source": (HOSTILE / "fork_bomb.py").read_text()}
    key_thief = (HOSTILE / "read_key.py").read_text()
    for mark, value in {"@KEY@": str(ROOT / "instructor" / "key.py"), "@OTHER_HANDIN@": str(ROOT / "tests"),
                        "@BUILD_KEYS@": str(ROOT / "instructor" / "build")}.items():
        key_thief = key_thief.replace(mark, value)
    thief = {"key": KEY, "function": "states_per_gpu", "source": key_thief}
    got = sandbox.run_submissions([bomb, thief, honest()], timeout_s=6, limits=LIMITS)
    assert got[0].ok is False and ("processes" in got[0].message or "BlockingIOError" in got[0].message), got[0]
    assert got[1].ok is False and "FileNotFoundError" in got[1].message, got[1].message
    assert got[2].ok is True, got[2].message
    assert survivors(list(sandbox.COSTS)) == []


def test_collect_finishes_for_the_class_beside_a_hostile_hand_in(tmp_path, monkeypatch):
    """Through the whole collect: mallory's answer forges verdicts, patches check_code and leaves a daemon that
    would rewrite class.csv; alice's honest answer keeps its verdict, and class.csv stays as collect wrote it."""
    import csv

    from labkit.course.collect import collect
    from labkit.teach import handin, journal

    hostile = "".join((HOSTILE / f"{n}.py").read_text() for n in ("patch_check_code", "fake_verdict"))
    hostile += (HOSTILE / "setsid_daemon.py").read_text().replace("@CLASS_CSV@", str(tmp_path / "class.csv"))
    (tmp_path / "handins").mkdir()
    for name, item in (("alice", honest()), ("mallory", {"source": hostile, "function": "states_per_gpu"})):
        monkeypatch.setenv("LABKIT_JOURNAL", str(tmp_path / f"{name}.jsonl"))
        journal.record("coding", KEY, item["function"], True, "", source=item["source"], failed=[])
        handin.export_answers(tmp_path / "handins" / f"{name}.json", student=name)
    rows = {r["student"]: r for r in collect(tmp_path / "handins", tmp_path, timeout_s=20)}
    written = (tmp_path / "class.csv").read_text()
    time.sleep(2.5)  # the daemon's moment, had it survived
    assert (tmp_path / "class.csv").read_text() == written
    table = {r["student"]: r for r in csv.DictReader(open(tmp_path / "class.csv"))}
    assert table["alice"]["coding_passed"] == "1" and table["mallory"]["coding_passed"] == "0", table
    assert rows["mallory"]["coding_passed"] == 0 and survivors(list(sandbox.COSTS)) == []
