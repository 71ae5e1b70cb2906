"""DiskStore and the raw-disk measurement: round trips, byte counts, cleanup, clear errors. Cost: about 3 s."""

from __future__ import annotations

import errno
import os
import threading
from pathlib import Path

import pytest
import torch

from labkit.errors import LabkitError
from labkit.offload.disk.bandwidth import measure_disk
from labkit.offload.disk.store import DiskStore


@pytest.fixture(params=[True, False], ids=["direct", "buffered"])
def store(request, tmp_path: Path):
    with DiskStore(tmp_path, direct=request.param, checksum=True) as s:
        yield s


def test_round_trip_counts_payload_bytes(store: DiskStore) -> None:
    t = torch.randn(33, 7).to(torch.bfloat16)
    store.write("a", t)
    back = store.read("a")
    assert torch.equal(back.view(torch.int16), t.view(torch.int16))
    out = torch.empty(33, 7, dtype=torch.bfloat16)
    store.read("a", out=out)
    assert torch.equal(out.view(torch.int16), t.view(torch.int16))
    assert store.counters.bytes_written == 33 * 7 * 2
    assert store.counters.bytes_read == 2 * 33 * 7 * 2


def test_cleanup_on_exit_and_on_failure(tmp_path: Path) -> None:
    with DiskStore(tmp_path) as s:
        s.write("x", torch.ones(10))
        path = s.path
        assert path is not None and path.exists()
    assert not path.exists()
    with pytest.raises(RuntimeError), DiskStore(tmp_path) as s:
        s.write("x", torch.ones(10))
        raise RuntimeError("boom")
    assert list(tmp_path.iterdir()) == []


def test_missing_and_truncated_files(store: DiskStore) -> None:
    store.write("a", torch.randn(5000))
    assert store.path is not None
    with pytest.raises(LabkitError, match="missing"):
        store.read("nope")
    (store.path / "a").unlink()
    with pytest.raises(LabkitError, match="missing"):
        store.read("a")
    store.write("b", torch.randn(5000))
    os.truncate(store.path / "b", 100)
    with pytest.raises(LabkitError, match="truncated"):
        store.read("b")


def test_checksum_catches_corruption(tmp_path: Path) -> None:
    with DiskStore(tmp_path, direct=False, checksum=True) as s:
        s.write("a", torch.zeros(100))
        assert s.path is not None
        with open(s.path / "a", "r+b") as f:
            f.write(b"\x01")
        with pytest.raises(LabkitError, match="checksum"):
            s.read("a")


def test_full_disk_quota_leaves_nothing(tmp_path: Path) -> None:
    with DiskStore(tmp_path, quota_bytes=10_000, direct=False) as s:
        s.write("a", torch.zeros(2000))  # 8000 bytes
        with pytest.raises(LabkitError, match="disk full"):
            s.write("b", torch.zeros(1000))
        s.write("a", torch.zeros(2500))  # replacing a file frees its old bytes
        assert s.path is not None and sorted(p.name for p in s.path.iterdir()) == ["a"]


def test_bad_input(tmp_path: Path) -> None:
    with pytest.raises(LabkitError, match="quota_bytes"):
        DiskStore(tmp_path, quota_bytes=0)
    with pytest.raises(LabkitError, match="root"):
        DiskStore(tmp_path / "absent")
    with DiskStore(tmp_path) as s:
        with pytest.raises(LabkitError, match="name"):
            s.write("../x", torch.zeros(1))
    with pytest.raises(LabkitError, match="closed"):
        s.write("x", torch.zeros(1))


def _read_only_folder(tmp_path: Path) -> Path:
    """A folder this process cannot create files in: mode 0o555 (root ignores modes: there, sysfs)."""
    folder = tmp_path / "ro"
    folder.mkdir(mode=0o555)
    if os.geteuid() != 0:
        return folder
    if not os.path.isdir("/sys/kernel"):
        pytest.skip("running as root without sysfs: no folder root cannot write")
    return Path("/sys/kernel")


def test_a_read_only_root_and_impossible_names_are_one_line_errors(tmp_path: Path) -> None:
    """Issue 37: these raised PermissionError, OSError (File name too long) and ValueError (embedded null byte)."""
    with pytest.raises(LabkitError, match=r"^root must be a folder labkit can write: (Permission denied|Operation "
                       r"not permitted) \(got '"):
        DiskStore(_read_only_folder(tmp_path))
    with pytest.raises(LabkitError, match=r"^root must be a folder path without a NUL byte"):
        DiskStore(str(tmp_path) + "\0x")
    with DiskStore(tmp_path) as s:
        for name, why in (("n" * 300, r"^name must be at most 255 bytes, the filesystem's limit \(got 300 bytes"),
                          ("a\0b", r"^name must not contain a NUL byte")):
            for call, args in ((s.write, (name, torch.zeros(2))), (s.read, (name,)), (s.remove, (name,))):
                with pytest.raises(LabkitError, match=why):
                    call(*args)
        s.write("n" * 255, torch.ones(2))  # the longest name the filesystem takes still works
        assert s.read("n" * 255).tolist() == [1.0, 1.0]


def test_measure_disk_is_quick_and_leaves_nothing(tmp_path: Path) -> None:
    bw = measure_disk(tmp_path, nbytes=16 * 2**20, block=4 * 2**20)
    assert bw.write_bps > 0 and bw.read_bps > 0 and bw.allocate_bps > 0
    assert bw.method in ("O_DIRECT", "buffered+fsync+DONTNEED", "buffered+fsync")
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(LabkitError, match="block"):
        measure_disk(tmp_path, nbytes=10 * 2**20, block=3 * 2**20)


def _eio(fail_on):
    """A stand-in for an os call that raises EIO, as a failing disk does, when ``fail_on(call number)``."""
    calls = []

    def wrap(real):
        def call(*args):
            calls.append(threading.current_thread().name)
            if fail_on(len(calls)):
                raise OSError(errno.EIO, os.strerror(errno.EIO))
            return real(*args)
        return call
    return wrap, calls


@pytest.mark.parametrize("direct", [True, False], ids=["direct", "buffered"])
def test_read_error_names_file_and_errno_also_from_an_io_thread(direct, tmp_path, monkeypatch) -> None:
    wrap, calls = _eio(lambda n: n == 3)
    with DiskStore(tmp_path, direct=direct, chunk_bytes=4096, io_threads=2) as s:
        t = torch.randn(8 * 1024)  # 32 KiB: eight chunks, read on the store's I/O threads
        s.write("states", t)
        monkeypatch.setattr(os, "preadv", wrap(os.preadv))
        with pytest.raises(LabkitError) as info:
            s.read("states")
        monkeypatch.undo()
        assert any(name.startswith("labkit-io") for name in calls)
        assert str(s.path / "states") in str(info.value) and "[Errno 5] Input/output error" in str(info.value)
        assert torch.equal(s.read("states"), t)  # the store is still usable
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("direct", [True, False], ids=["direct", "buffered"])
def test_failed_rewrite_reads_as_missing_never_as_a_torn_file(direct, tmp_path, monkeypatch) -> None:
    wrap, _ = _eio(lambda n: n == (2 if direct else 1))  # direct: mid-file, 4 chunks
    with DiskStore(tmp_path, direct=direct, chunk_bytes=4096, io_threads=2) as s:
        s.write("a", torch.zeros(4096))
        monkeypatch.setattr(os, "pwritev", wrap(os.pwritev))
        with pytest.raises(LabkitError, match=r"writing offload file .*a: \[Errno 5\] Input/output error"):
            s.write("a", torch.ones(4096))
        monkeypatch.undo()
        with pytest.raises(LabkitError, match="missing"):
            s.read("a")
        assert s.path is not None and list(s.path.iterdir()) == [] and s.bytes_on_disk == 0
    assert list(tmp_path.iterdir()) == []


def test_rewrite_in_place_and_reads_are_independent(store: DiskStore) -> None:
    assert store.path is not None
    store.write("a", torch.zeros(3000))
    inode = os.stat(store.path / "a").st_ino
    store.write("a", torch.arange(3000.0))  # same size: the same file, overwritten
    assert os.stat(store.path / "a").st_ino == inode
    first, second = store.read("a"), store.read("a")  # staging memory is reused, results are not
    first.zero_()
    assert torch.equal(second, torch.arange(3000.0)) and torch.equal(store.read("a"), torch.arange(3000.0))
    store.write("a", torch.zeros(10))  # another size: a new file
    assert torch.equal(store.read("a"), torch.zeros(10))


def test_without_posix_fadvise_as_on_macos_the_store_and_the_measure_still_work(tmp_path, monkeypatch) -> None:
    """Issue 23: macOS has no os.posix_fadvise; the buffered path skips the cache hint and says so."""
    from labkit.offload.disk import bandwidth, io

    monkeypatch.delattr(os, "posix_fadvise")
    monkeypatch.setattr(io, "CAN_DROP_CACHE", False)
    monkeypatch.setattr(bandwidth, "BUFFERED", "buffered+fsync")
    monkeypatch.setattr(bandwidth, "direct_io_supported", lambda d: False)
    with DiskStore(tmp_path, direct=False) as s:
        s.write("a", torch.arange(5000.0))
        assert torch.equal(s.read("a"), torch.arange(5000.0))
    bw = measure_disk(tmp_path, nbytes=2**20, block=2**18)
    assert bw.method == "buffered+fsync" and bw.read_bps > 0
    assert list(tmp_path.iterdir()) == []
