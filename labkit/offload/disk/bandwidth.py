"""The raw sequential bandwidth of one disk, measured as ``fio`` does (lay out, overwrite, read; page cache bypassed).

:func:`measure_disk` lays a file out, then overwrites and reads it sequentially with
``O_DIRECT`` from page-aligned memory (the file system's block allocation is not the disk's
bandwidth; the first, allocating pass is reported beside it). Where the filesystem refuses
``O_DIRECT`` (tmpfs, some overlays) it falls back to buffered I/O + ``fsync`` + dropping the
page cache (where the OS can) and says so in ``method``. A disk that fills up raises
:class:`DiskFull` and the test file is removed.
"""

from __future__ import annotations

import mmap
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from labkit.errors import LabkitError, require_positive
from labkit.offload.disk.io import (
    BLOCK,
    BUFFERED,
    DiskFull,
    GiB,
    MiB,
    as_labkit,
    direct_io_supported,
    drop_cache,
    pread_all,
    pwrite_all,
    unmap,
)


@dataclass(frozen=True)
class DiskBandwidth:
    """Raw sequential bandwidth of one disk, in bytes per second (GiB = 2**30 when shown).

    ``write_bps`` overwrites a laid-out file; ``allocate_bps`` is the first pass, which also
    has the file system allocate the blocks (``fio`` lays its file out first for this reason).
    """

    write_bps: float
    read_bps: float
    nbytes: int
    method: str  # "O_DIRECT" or io.BUFFERED ("buffered+fsync", "+DONTNEED" where the OS drops caches)
    directory: str
    allocate_bps: float = 0.0

    def summary(self) -> str:
        return (f"{self.method}: write {self.write_bps / GiB:.2f} GiB/s, read {self.read_bps / GiB:.2f} GiB/s, "
                f"first allocating write {self.allocate_bps / GiB:.2f} GiB/s "
                f"({self.nbytes / MiB:.0f} MiB under {self.directory})")


def measure_disk(directory: str | Path | None = None, nbytes: int = 128 * MiB, block: int = 8 * MiB) -> DiskBandwidth:
    """Lay out, overwrite, then read ``nbytes`` sequentially in ``block``-sized aligned requests.

    One request in flight at a time. The file lives in a fresh temporary directory that is
    removed afterwards, also on error.
    """
    require_positive("nbytes", nbytes)
    require_positive("block", block)
    if block % BLOCK or nbytes % block:
        raise LabkitError(f"block must be a multiple of {BLOCK} dividing nbytes (got block={block}, nbytes={nbytes})")
    root = Path(directory or tempfile.gettempdir())
    if not root.is_dir():
        raise LabkitError(f"directory must be an existing directory (got {str(root)!r})")
    free = shutil.disk_usage(root).free
    if nbytes > free:
        raise DiskFull(f"nbytes must fit the free space under {root} ({free:,} bytes free; got {nbytes:,})")
    direct = direct_io_supported(root)
    method = "O_DIRECT" if direct else BUFFERED
    flag = os.O_DIRECT if direct else 0
    work = Path(tempfile.mkdtemp(prefix="labkit-disk-", dir=root))
    buf = mmap.mmap(-1, block)  # anonymous maps are page-aligned
    buf.write(os.urandom(block))  # incompressible, in case the device compresses
    path = work / "bandwidth.bin"

    def write_pass(extra: int) -> float:
        fd = os.open(path, os.O_CREAT | os.O_WRONLY | extra | flag, 0o600)
        t0 = time.perf_counter()
        try:
            for i in range(nbytes // block):
                pwrite_all(fd, memoryview(buf), i * block)
            os.fsync(fd)
            if not direct:
                drop_cache(fd)
        except OSError as e:
            raise as_labkit(e, str(path), "writing") from e
        finally:
            os.close(fd)
        return time.perf_counter() - t0

    try:
        t_alloc = write_pass(os.O_TRUNC)
        t_write = write_pass(0)
        fd = os.open(path, os.O_RDONLY | flag)
        try:
            if not direct:
                drop_cache(fd)
            t0 = time.perf_counter()
            got = 0
            while got < nbytes:
                n = pread_all(fd, memoryview(buf), got)
                if n == 0:
                    break
                got += n
            t_read = time.perf_counter() - t0
        finally:
            os.close(fd)
        return DiskBandwidth(nbytes / t_write, got / t_read, nbytes, method, str(root), nbytes / t_alloc)
    finally:
        shutil.rmtree(work, ignore_errors=True)  # first: closing a map still viewed by a traceback must not stop it
        unmap(buf)
