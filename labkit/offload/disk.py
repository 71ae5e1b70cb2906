"""Real bytes on a real disk: raw bandwidth of the disk, and a store of named tensors as files.

Why this module exists: ZeRO-Infinity (Rajbhandari et al., SC 2021) keeps model states on
NVMe and claims that the offload path can use most of the drive's sequential bandwidth. A
claim like that is only worth checking against the *same* disk measured in the *same* run,
and with the page cache out of the way: buffered writes and reads on Linux measure DRAM,
not the SSD (see the lab's field notes: O_DIRECT write ~1.5 GiB/s, read ~0.9 GiB/s here).

* :func:`measure_disk` writes and reads one file sequentially with ``O_DIRECT`` and
  page-aligned buffers; where the filesystem refuses ``O_DIRECT`` (tmpfs, some overlays) it
  falls back to buffered I/O + ``fsync`` + ``posix_fadvise(DONTNEED)`` and says so in
  ``method``.
* :class:`DiskStore` writes and reads named tensors as raw files (atomic: a temporary file
  then ``os.replace``), counts payload bytes and seconds spent in I/O, enforces an optional
  quota (a testable "disk full"), and removes its directory on exit, also after a failure.
  With ``O_DIRECT`` a file moves in chunks, several in flight on a small thread pool, from
  and into page-aligned memory: staging buffers are reused, a tensor the store read is
  written back from where it lies, and the file is preallocated so chunks need not extend it.

Files written with ``O_DIRECT`` are padded to the 4096-byte block; the *payload* counters
(``bytes_written``/``bytes_read``) count tensor bytes only, so they match the analytic
counts of ``zero_infinity``; ``padded_*`` count what went to the device.
"""

from __future__ import annotations

import errno
import mmap
import os
import shutil
import tempfile
import threading
import time
import zlib
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path

import torch

from labkit.errors import LabkitError, require_positive

BLOCK = 4096  # O_DIRECT alignment: offsets, lengths and buffer addresses
MiB = 2**20
GiB = 2**30


def _padded(n: int) -> int:
    return max(BLOCK, -(-n // BLOCK) * BLOCK)


def direct_io_supported(directory: str | Path) -> bool:
    """Whether files under ``directory`` can be opened with ``O_DIRECT`` and written aligned."""
    if not hasattr(os, "O_DIRECT"):
        return False
    probe = Path(tempfile.mkdtemp(prefix="labkit-probe-", dir=directory))
    try:
        fd = os.open(probe / "p", os.O_CREAT | os.O_WRONLY | os.O_DIRECT, 0o600)
        try:
            buf = mmap.mmap(-1, BLOCK)
            os.write(fd, buf)
            buf.close()
        finally:
            os.close(fd)
        return True
    except OSError:
        return False
    finally:
        shutil.rmtree(probe, ignore_errors=True)


@dataclass(frozen=True)
class DiskBandwidth:
    """Raw sequential bandwidth of one disk, in bytes per second (GiB = 2**30 when shown)."""

    write_bps: float
    read_bps: float
    nbytes: int
    method: str  # "O_DIRECT" or "buffered+fsync+DONTNEED"
    directory: str

    def summary(self) -> str:
        return (f"{self.method}: write {self.write_bps / GiB:.2f} GiB/s, read {self.read_bps / GiB:.2f} GiB/s "
                f"({self.nbytes / MiB:.0f} MiB under {self.directory})")


def measure_disk(directory: str | Path | None = None, nbytes: int = 128 * MiB, block: int = 8 * MiB) -> DiskBandwidth:
    """Write then read ``nbytes`` sequentially in ``block``-sized aligned chunks; a few seconds.

    The file lives in a fresh temporary directory that is removed afterwards, also on error.
    """
    require_positive("nbytes", nbytes)
    require_positive("block", block)
    if block % BLOCK or nbytes % block:
        raise LabkitError(f"block must be a multiple of {BLOCK} dividing nbytes (got block={block}, nbytes={nbytes})")
    root = Path(directory or tempfile.gettempdir())
    if not root.is_dir():
        raise LabkitError(f"directory must be an existing directory (got {str(root)!r})")
    direct = direct_io_supported(root)
    method = "O_DIRECT" if direct else "buffered+fsync+DONTNEED"
    flag = os.O_DIRECT if direct else 0
    work = Path(tempfile.mkdtemp(prefix="labkit-disk-", dir=root))
    buf = mmap.mmap(-1, block)  # anonymous maps are page-aligned
    buf.write(os.urandom(block))  # incompressible, in case the device compresses
    try:
        path = work / "bandwidth.bin"
        fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC | flag, 0o600)
        t0 = time.perf_counter()
        try:
            for _ in range(nbytes // block):
                _write_all(fd, buf)
            os.fsync(fd)
            if not direct:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        except OSError as e:
            raise _as_labkit(e, str(path)) from e
        finally:
            os.close(fd)
        t_write = time.perf_counter() - t0
        fd = os.open(path, os.O_RDONLY | flag)
        try:
            if not direct:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            t0 = time.perf_counter()
            got = 0
            while got < nbytes:
                n = os.readv(fd, [buf])
                if n == 0:
                    break
                got += n
            t_read = time.perf_counter() - t0
        finally:
            os.close(fd)
        return DiskBandwidth(nbytes / t_write, got / t_read, nbytes, method, str(root))
    finally:
        buf.close()
        shutil.rmtree(work, ignore_errors=True)


def _write_all(fd: int, buf: mmap.mmap | memoryview) -> None:
    view = memoryview(buf)
    while len(view):
        n = os.write(fd, view)
        view = view[n:]


def _as_labkit(e: OSError, path: str) -> LabkitError:
    if e.errno in (errno.ENOSPC, errno.EDQUOT):
        return LabkitError(f"disk full while writing {path}: free space on the offload disk or lower the model size")
    return LabkitError(f"I/O error on offload file {path}: {e.strerror or e}")


@dataclass
class _Entry:
    dtype: torch.dtype
    shape: tuple[int, ...]
    nbytes: int
    disk_bytes: int
    crc: int | None


@dataclass
class IOCounters:
    """Payload bytes and the seconds the disk was busy (what the disk achieved).

    ``read_seconds``/``write_seconds`` count wall-clock time with at least one read (write)
    in flight, so several requests in flight are not counted several times; with one
    request at a time this is the sum of the call durations. ``busy_seconds`` counts time
    with any I/O in flight, reads and writes together.
    """

    bytes_written: int = 0
    bytes_read: int = 0
    write_seconds: float = 0.0
    read_seconds: float = 0.0
    padded_written: int = 0
    padded_read: int = 0
    busy_seconds: float = 0.0

    @property
    def write_bps(self) -> float:
        return self.padded_written / self.write_seconds if self.write_seconds else 0.0

    @property
    def read_bps(self) -> float:
        return self.padded_read / self.read_seconds if self.read_seconds else 0.0


class _Busy:
    """Union of the intervals during which reads, writes, or either are in flight."""

    def __init__(self) -> None:
        self.active = {"read": 0, "write": 0, "any": 0}
        self.since = {"read": 0.0, "write": 0.0, "any": 0.0}

    def enter(self, kind: str) -> None:
        now = time.perf_counter()
        for k in (kind, "any"):
            if self.active[k] == 0:
                self.since[k] = now
            self.active[k] += 1

    def leave(self, kind: str, c: IOCounters) -> None:
        now = time.perf_counter()
        for k in (kind, "any"):
            self.active[k] -= 1
            if self.active[k] == 0:
                dt = now - self.since[k]
                if k == "read":
                    c.read_seconds += dt
                elif k == "write":
                    c.write_seconds += dt
                else:
                    c.busy_seconds += dt


def _aligned_bytes(size: int) -> torch.Tensor:
    """A uint8 tensor of ``size`` bytes whose first byte is page-aligned (what ``O_DIRECT`` needs)."""
    base = torch.empty(size + BLOCK, dtype=torch.uint8)
    off = -base.data_ptr() % BLOCK
    return base[off:off + size]


def _aligned_span(t: torch.Tensor, size: int) -> torch.Tensor | None:
    """``size`` bytes of ``t``'s storage from its first byte, if that byte is page-aligned and they exist."""
    storage = t.untyped_storage()
    if t.data_ptr() % BLOCK or t.storage_offset() + size > storage.nbytes() or t.numel() == 0:
        return None
    return torch.empty(0, dtype=torch.uint8).set_(storage, t.storage_offset(), (size,))


def _pwrite_all(fd: int, view: memoryview, offset: int) -> None:
    while len(view):
        n = os.pwritev(fd, [view], offset)
        view, offset = view[n:], offset + n


def _pread_all(fd: int, view: memoryview, offset: int) -> int:
    got = 0
    while got < len(view):
        n = os.preadv(fd, [view[got:]], offset + got)
        if n == 0:
            break
        got += n
    return got


@dataclass
class DiskStore:
    """Named tensors as raw files in a private temporary directory (a context manager).

    ``direct=None`` uses ``O_DIRECT`` where the filesystem supports it. ``quota_bytes`` caps
    the bytes on disk (padded sizes): a write past it raises the same "disk full" error a
    real ``ENOSPC`` does, so the failure can be shown and tested without filling a disk.
    Safe to use from one reader thread and one writer thread at once (distinct names).

    With ``O_DIRECT`` each file is moved in ``chunk_bytes`` pieces, ``io_threads`` of them in
    flight at once (one open file, page-aligned buffers reused between writes; a read
    without ``out`` returns a tensor over the very buffer the disk wrote into, no copy).
    """

    root: str | Path | None = None
    quota_bytes: int | None = None
    checksum: bool = False
    direct: bool | None = None
    counters: IOCounters = field(default_factory=IOCounters)
    io_threads: int = 4
    chunk_bytes: int = 4 * MiB
    path: Path | None = field(default=None, init=False)
    _entries: dict[str, _Entry] = field(default_factory=dict, init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.quota_bytes is not None:
            require_positive("quota_bytes", self.quota_bytes)
        require_positive("io_threads", self.io_threads)
        require_positive("chunk_bytes", self.chunk_bytes)
        if self.chunk_bytes % BLOCK:
            raise LabkitError(f"chunk_bytes must be a multiple of {BLOCK} (got {self.chunk_bytes})")
        base = Path(self.root or tempfile.gettempdir())
        if not base.is_dir():
            raise LabkitError(f"root must be an existing directory (got {str(base)!r})")
        if self.direct is None:
            self.direct = direct_io_supported(base)
        self._busy = _Busy()
        self._free: dict[int, list[mmap.mmap]] = {}
        self._pool = ThreadPoolExecutor(max_workers=self.io_threads, thread_name_prefix="labkit-io")
        self.path = Path(tempfile.mkdtemp(prefix="labkit-offload-", dir=base))

    @property
    def method(self) -> str:
        return "O_DIRECT" if self.direct else "buffered+fsync+DONTNEED"

    def __enter__(self) -> DiskStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Remove every file and the directory; safe to call twice."""
        self._pool.shutdown(wait=True, cancel_futures=True)
        if self.path is not None:
            shutil.rmtree(self.path, ignore_errors=True)
            self.path = None
        self._entries.clear()
        with self._lock:
            bufs = [b for free in self._free.values() for b in free]
            self._free.clear()
        for b in bufs:
            try:
                b.close()
            except BufferError:  # still viewed somewhere: the garbage collector unmaps it
                pass

    # ---- page-aligned staging buffers, reused between writes ----
    def _take(self, size: int) -> mmap.mmap:
        with self._lock:
            free = self._free.get(size)
            if free:
                return free.pop()
        return mmap.mmap(-1, size)  # anonymous maps are page-aligned

    def _give(self, buf: mmap.mmap) -> None:
        with self._lock:
            free = self._free.setdefault(len(buf), [])
            if len(free) < 2:
                free.append(buf)
                return
        buf.close()

    def _chunks(self, size: int) -> list[tuple[int, int]]:
        step = self.chunk_bytes
        return [(off, min(step, size - off)) for off in range(0, size, step)]

    def _parallel(self, fn, chunks: list[tuple[int, int]]) -> list:
        if len(chunks) == 1:
            return [fn(*chunks[0])]
        futures = [self._pool.submit(fn, off, n) for off, n in chunks]
        wait(futures)  # every chunk is done with the file before an error closes it
        return [f.result() for f in futures]

    def _file(self, name: str) -> Path:
        if self.path is None:
            raise LabkitError("DiskStore is closed: open a new one (use it as a context manager)")
        if not name or "/" in name or name.startswith("."):
            raise LabkitError(f"name must be a plain file name without '/' (got {name!r})")
        return self.path / name

    @property
    def bytes_on_disk(self) -> int:
        return sum(e.disk_bytes for e in self._entries.values())

    def names(self) -> list[str]:
        return sorted(self._entries)

    def write(self, name: str, tensor: torch.Tensor) -> None:
        """Write ``tensor`` under ``name`` atomically (temporary file, then rename)."""
        path = self._file(name)
        src_t = tensor.detach().contiguous().view(-1).view(torch.uint8)
        src = src_t.numpy()
        nbytes = int(src.nbytes)
        disk = _padded(nbytes) if self.direct else nbytes
        with self._lock:
            old = self._entries.get(name)
            used = self.bytes_on_disk - (old.disk_bytes if old else 0)
            if self.quota_bytes is not None and used + disk > self.quota_bytes:
                raise LabkitError(f"disk full: writing {name!r} ({disk} bytes) would exceed quota_bytes="
                                  f"{self.quota_bytes} ({used} bytes in use)")
        tmp = path.with_name(f".{name}.tmp")
        with self._lock:
            self._busy.enter("write")
        try:
            if self.direct and (direct_src := _aligned_span(src_t, disk)) is not None:
                # page-aligned already (e.g. a tensor this store read): written from where it lies, no copy
                fd = os.open(tmp, os.O_CREAT | os.O_WRONLY | os.O_TRUNC | os.O_DIRECT, 0o600)
                try:
                    os.posix_fallocate(fd, 0, disk)  # chunks then land inside the file: they need not extend it in turn
                    span = memoryview(direct_src.numpy())
                    self._parallel(lambda off, n: _pwrite_all(fd, span[off:off + n], off), self._chunks(disk))
                finally:
                    os.close(fd)
            elif self.direct:
                buf = self._take(disk)
                try:
                    stage = torch.frombuffer(buf, dtype=torch.uint8)
                    stage[nbytes:].zero_()
                    view = memoryview(buf)
                    fd = os.open(tmp, os.O_CREAT | os.O_WRONLY | os.O_TRUNC | os.O_DIRECT, 0o600)
                    try:
                        os.posix_fallocate(fd, 0, disk)
                        def put(off: int, n: int) -> None:
                            end = min(off + n, nbytes)
                            if end > off:
                                stage[off:end].copy_(src_t[off:end])  # torch copies without the GIL
                            _pwrite_all(fd, view[off:off + n], off)

                        self._parallel(put, self._chunks(disk))
                    finally:
                        os.close(fd)
                finally:
                    self._give(buf)
            else:
                fd = os.open(tmp, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o600)
                try:
                    _write_all(fd, memoryview(src))
                    os.fsync(fd)
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                finally:
                    os.close(fd)
            os.replace(tmp, path)
        except OSError as e:
            tmp.unlink(missing_ok=True)
            raise _as_labkit(e, str(path)) from e
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        finally:
            with self._lock:
                self._busy.leave("write", self.counters)
        crc = zlib.crc32(src) if self.checksum else None
        with self._lock:
            self._entries[name] = _Entry(tensor.dtype, tuple(tensor.shape), nbytes, disk, crc)
            c = self.counters
            c.bytes_written += nbytes
            c.padded_written += disk

    def read(self, name: str, out: torch.Tensor | None = None) -> torch.Tensor:
        """Read ``name`` back (into ``out`` when given); missing or truncated files raise LabkitError."""
        path = self._file(name)
        entry = self._entries.get(name)
        if entry is None or not path.exists():
            raise LabkitError(f"offload file {name!r} is missing from {self.path}")
        size = path.stat().st_size
        if size < entry.disk_bytes:
            raise LabkitError(f"offload file {name!r} is truncated: {size} bytes on disk, expected {entry.disk_bytes}")
        if out is not None and (out.dtype != entry.dtype or tuple(out.shape) != entry.shape
                                or not out.is_contiguous()):
            raise LabkitError(f"out must be a contiguous {entry.dtype} tensor of shape {entry.shape} for {name!r}")
        with self._lock:
            self._busy.enter("read")
        try:
            if self.direct:
                out = self._read_direct(name, path, entry, out)
            else:
                if out is None:
                    out = torch.empty(entry.shape, dtype=entry.dtype)
                dst = out.view(-1).view(torch.uint8).numpy()
                with open(path, "rb", buffering=0) as f:
                    got = f.readinto(memoryview(dst))
                    os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
                if got != entry.nbytes:
                    raise LabkitError(f"offload file {name!r} is truncated: read {got} of {entry.nbytes} bytes")
        except OSError as e:
            raise _as_labkit(e, str(path)) from e
        finally:
            with self._lock:
                self._busy.leave("read", self.counters)
        if entry.crc is not None and zlib.crc32(out.view(-1).view(torch.uint8).numpy()) != entry.crc:
            raise LabkitError(f"offload file {name!r} failed its checksum: the file was changed or corrupted")
        with self._lock:
            c = self.counters
            c.bytes_read += entry.nbytes
            c.padded_read += entry.disk_bytes
        return out

    def _read_direct(self, name: str, path: Path, entry: _Entry, out: torch.Tensor | None) -> torch.Tensor:
        """``O_DIRECT`` read in chunks, several in flight, straight into a page-aligned buffer."""
        nbytes = entry.nbytes
        own = out is None
        buf = None if own else self._take(entry.disk_bytes)
        try:
            if own:  # page-aligned memory from torch's allocator, often already faulted in (unlike a fresh map)
                src = _aligned_bytes(entry.disk_bytes)
                view = memoryview(src.numpy())
            else:
                src = torch.frombuffer(buf, dtype=torch.uint8)
                view = memoryview(buf)
            dst = None if own else out.view(-1).view(torch.uint8)
            fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
            try:
                def get(off: int, n: int) -> int:
                    got = _pread_all(fd, view[off:off + n], off)
                    end = min(off + got, nbytes)
                    if dst is not None and end > off:
                        dst[off:end].copy_(src[off:end])
                    return got

                got = sum(self._parallel(get, self._chunks(entry.disk_bytes)))
            finally:
                os.close(fd)
            if got < entry.disk_bytes:
                raise LabkitError(f"offload file {name!r} is truncated: read {got} of {entry.disk_bytes} bytes")
            if not own:
                return out
            if nbytes == 0:
                return torch.empty(entry.shape, dtype=entry.dtype)
            return src[:nbytes].view(entry.dtype).view(entry.shape)
        finally:
            if not own:
                self._give(buf)
