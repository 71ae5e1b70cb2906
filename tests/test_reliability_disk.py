"""The offload disk returns what it wrote or says why, by default; a disk that fills up leaves nothing behind.

Issue 24: with the store's defaults (what every notebook uses) a file replaced underneath by one
of the same size or a larger one, a symlink, or one flipped bit is an error naming the file;
``measure_disk`` on a full disk raises ``DiskFull`` and removes its test file.
"""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

import pytest
import torch

from labkit.errors import LabkitError
from labkit.offload.disk.bandwidth import measure_disk
from labkit.offload.disk.io import DiskFull
from labkit.offload.disk.store import DiskStore


@pytest.fixture(params=[None, False], ids=["default", "buffered"])
def store(request, tmp_path: Path):
    with DiskStore(tmp_path, direct=request.param) as s:  # checksum left at its default
        s.write("w", torch.arange(3000.0))
        s.write("other", torch.arange(3000.0).flip(0))
        yield s


def _same_size_swap(s: DiskStore) -> None:
    os.replace(s.path / "other", s.path / "w")


def _flip(s: DiskStore) -> None:
    with open(s.path / "w", "r+b") as f:
        f.seek(100)
        b = f.read(1)
        f.seek(100)
        f.write(bytes([b[0] ^ 1]))


def _grow(s: DiskStore) -> None:
    with open(s.path / "w", "ab") as f:
        f.write(bytes(8192))


def _symlink(s: DiskStore) -> None:
    (s.path / "w").unlink()
    (s.path / "w").symlink_to(s.path / "other")


FAULTS = {"same-size replacement": (_same_size_swap, "failed its checksum"),
          "one flipped bit": (_flip, "failed its checksum"),
          "a larger file": (_grow, "is grown"),
          "a symlink": (_symlink, "replaced by a symlink")}


@pytest.mark.parametrize("fault", FAULTS)
def test_each_change_underneath_is_detected_by_default(store, fault):
    plant, message = FAULTS[fault]
    assert store.checksum is True
    plant(store)
    with pytest.raises(LabkitError, match=message) as info:
        store.read("w")
    assert str(store.path / "w") in str(info.value)
    with pytest.raises(LabkitError, match=message):
        store.read("w", out=torch.empty(3000))


def test_a_write_never_follows_a_planted_symlink(tmp_path):
    target = tmp_path / "outside"
    target.write_bytes(b"keep")
    (tmp_path / "s").mkdir()
    with DiskStore(tmp_path / "s", direct=False) as s:
        (s.path / "w").symlink_to(target)
        with pytest.raises(LabkitError, match="offload file"):
            s.write("w", torch.ones(10))
    assert target.read_bytes() == b"keep"


def test_measure_disk_on_a_full_disk_raises_diskfull_and_leaves_nothing(tmp_path, monkeypatch):
    calls = []
    real = os.pwritev

    def fills(fd, bufs, offset):
        calls.append(offset)
        if len(calls) > 2:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(fd, bufs, offset)

    monkeypatch.setattr(os, "pwritev", fills)
    with pytest.raises(DiskFull, match="disk full while writing .*bandwidth.bin"):
        measure_disk(tmp_path, nbytes=2**20, block=2**18)
    assert len(calls) == 3 and list(tmp_path.iterdir()) == []


def test_measure_disk_refuses_more_than_the_free_space_up_front(tmp_path):
    free = shutil.disk_usage(tmp_path).free
    block = 2**20
    with pytest.raises(DiskFull, match="nbytes must fit the free space"):
        measure_disk(tmp_path, nbytes=(free // block + 1) * block, block=block)
    assert list(tmp_path.iterdir()) == []
