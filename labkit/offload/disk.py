"""Real bytes on a real disk: raw bandwidth of the disk, and a store of named tensors as files.

Why this module exists: ZeRO-Infinity (Rajbhandari et al., SC 2021) keeps model states on
NVMe and claims that the offload path can use most of the drive's sequential bandwidth. A
claim like that is only worth checking against the *same* disk measured in the *same* run,
and with the page cache out of the way: buffered writes and reads on Linux measure DRAM,
not the SSD (see the lab's field notes: O_DIRECT write ~1.5 GiB/s, read ~0.9 GiB/s here).

* :func:`measure_disk` lays a file out, then overwrites and reads it sequentially with
  ``O_DIRECT`` from page-aligned memory (as ``fio`` does: the file system's block allocation
  is not the disk's bandwidth; the first, allocating pass is reported beside it). Where the
  filesystem refuses ``O_DIRECT`` (tmpfs, some overlays) it falls back to buffered I/O +
  ``fsync`` + ``posix_fadvise(DONTNEED)`` and says so in ``method``.
* :class:`DiskStore` writes and reads named tensors as raw files, counts payload bytes and
  seconds spent in I/O, enforces an optional quota (a testable "disk full"), and removes its
  directory on exit, also after a failure. What made it reach the raw disk (measured here:
  a rewrite into a new file ran at half the speed of an overwrite, and a read into freshly
  mapped memory lost a quarter of its bandwidth to page faults):

  - a rewrite of a name overwrites the blocks its file already has: no allocation, no
    unwritten-extent conversion, no discard of freed blocks (this disk is mounted ``discard``).
    While it runs, and after it fails, the name reads as an error, never as a torn mixture;
  - the disk's DMA goes through page-aligned staging buffers that are lent per request and
    kept (already mapped) for the next one; the copy between a tensor and its buffer is done
    chunk by chunk on the I/O threads, overlapping the next chunk's transfer;
  - a tensor that already lies page-aligned is written from where it lies.

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

import numpy as np
import torch

from labkit.errors import LabkitError, require_positive

BLOCK = 4096  # O_DIRECT alignment: offsets, lengths and buffer addresses
MiB = 2**20
GiB = 2**30


class DiskFull(LabkitError):
    """The disk (``ENOSPC``/``EDQUOT``) or the store's quota is full."""


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
    """Raw sequential bandwidth of one disk, in bytes per second (GiB = 2**30 when shown).

    ``write_bps`` overwrites a laid-out file; ``allocate_bps`` is the first pass, which also
    has the file system allocate the blocks (``fio`` lays its file out first for this reason).
    """

    write_bps: float
    read_bps: float
    nbytes: int
    method: str  # "O_DIRECT" or "buffered+fsync+DONTNEED"
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
    direct = direct_io_supported(root)
    method = "O_DIRECT" if direct else "buffered+fsync+DONTNEED"
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
                _pwrite_all(fd, memoryview(buf), i * block)
            os.fsync(fd)
            if not direct:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        except OSError as e:
            raise _as_labkit(e, str(path), "writing") from e
        finally:
            os.close(fd)
        return time.perf_counter() - t0

    try:
        t_alloc = write_pass(os.O_TRUNC)
        t_write = write_pass(0)
        fd = os.open(path, os.O_RDONLY | flag)
        try:
            if not direct:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            t0 = time.perf_counter()
            got = 0
            while got < nbytes:
                n = _pread_all(fd, memoryview(buf), got)
                if n == 0:
                    break
                got += n
            t_read = time.perf_counter() - t0
        finally:
            os.close(fd)
        return DiskBandwidth(nbytes / t_write, got / t_read, nbytes, method, str(root), nbytes / t_alloc)
    finally:
        buf.close()
        shutil.rmtree(work, ignore_errors=True)


def _as_labkit(e: OSError, path: str, doing: str) -> LabkitError:
    """The OS error as a LabkitError naming the file, what was done and the errno's text."""
    if e.errno in (errno.ENOSPC, errno.EDQUOT):
        return DiskFull(f"disk full while writing {path}: free space on the offload disk or lower the model size")
    text = e.strerror or (os.strerror(e.errno) if e.errno else str(e) or type(e).__name__)
    code = f"[Errno {e.errno}] " if e.errno else ""
    return LabkitError(f"I/O error {doing} offload file {path}: {code}{text}")


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


def _aligned_span(t: torch.Tensor, size: int) -> torch.Tensor | None:
    """``size`` bytes of ``t``'s storage from its first byte, if that byte is page-aligned and they exist."""
    storage = t.untyped_storage()
    if t.data_ptr() % BLOCK or t.storage_offset() + size > storage.nbytes() or t.numel() == 0:
        return None
    return torch.empty(0, dtype=torch.uint8).set_(storage, t.storage_offset(), (size,))


class _Buffers:
    """Page-aligned staging buffers (anonymous maps), lent for one read or write and given back.

    They never leave the store, so reuse is safe by construction, and their pages stay
    mapped: the disk's DMA lands in memory without page faults. Up to ``cap`` bytes of free
    buffers are kept.
    """

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self._free: list[mmap.mmap] = []
        self._lock = threading.Lock()

    def take(self, size: int) -> mmap.mmap:
        with self._lock:
            for i, buf in enumerate(self._free):
                if len(buf) == size:
                    return self._free.pop(i)
        return mmap.mmap(-1, size)

    def give(self, buf: mmap.mmap) -> None:
        with self._lock:
            self._free.append(buf)
            while sum(len(b) for b in self._free) > self.cap:
                _unmap(self._free.pop(0))

    def close(self) -> None:
        with self._lock:
            bufs, self._free = self._free, []
        for b in bufs:
            _unmap(b)


def _unmap(buf: mmap.mmap) -> None:
    try:
        buf.close()
    except BufferError:  # still viewed (e.g. from an exception's traceback): the garbage collector unmaps it
        pass


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


@dataclass
class DiskStore:
    """Named tensors as raw files in a private temporary directory (a context manager).

    ``direct=None`` uses ``O_DIRECT`` where the filesystem supports it. ``quota_bytes`` caps
    the bytes on disk (padded sizes): a write past it raises the same :class:`DiskFull` a
    real ``ENOSPC`` does, so the failure can be shown and tested without filling a disk.
    Safe to use from several threads at once on distinct names.

    Each file moves in ``chunk_bytes`` requests, up to ``io_threads`` of them in flight;
    ``pool_bytes`` caps the page-aligned staging memory kept for reuse (see the module docstring).
    """

    root: str | Path | None = None
    quota_bytes: int | None = None
    checksum: bool = False
    direct: bool | None = None
    counters: IOCounters = field(default_factory=IOCounters)
    io_threads: int = 2
    chunk_bytes: int = 8 * MiB
    pool_bytes: int = 256 * MiB
    path: Path | None = field(default=None, init=False)
    _entries: dict[str, _Entry] = field(default_factory=dict, init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.quota_bytes is not None:
            require_positive("quota_bytes", self.quota_bytes)
        for name in ("io_threads", "chunk_bytes", "pool_bytes"):
            require_positive(name, getattr(self, name))
        if self.chunk_bytes % BLOCK:
            raise LabkitError(f"chunk_bytes must be a multiple of {BLOCK} (got {self.chunk_bytes})")
        base = Path(self.root or tempfile.gettempdir())
        if not base.is_dir():
            raise LabkitError(f"root must be an existing directory (got {str(base)!r})")
        if self.direct is None:
            self.direct = direct_io_supported(base)
        self._busy = _Busy()
        self._buffers = _Buffers(self.pool_bytes)
        self._writing: set[str] = set()
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
        self._buffers.close()

    def _chunks(self, size: int) -> list[tuple[int, int]]:
        step = self.chunk_bytes
        return [(off, min(step, size - off)) for off in range(0, size, step)]

    def _parallel(self, fn, size: int) -> list:
        chunks = self._chunks(size)
        if len(chunks) == 1 or self.io_threads == 1:
            return [fn(off, n) for off, n in chunks]
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

    def remove(self, name: str) -> None:
        """Delete ``name``'s file and forget it (a no-op for an unknown name)."""
        path = self._file(name)
        with self._lock:
            self._entries.pop(name, None)
        path.unlink(missing_ok=True)

    def write(self, name: str, tensor: torch.Tensor) -> None:
        """Write ``tensor`` under ``name``; a rewrite of the same size overwrites the file in place.

        Until the write is done the name reads as an error; if it fails the file is removed
        (a later read says it is missing) and the error names the file and the errno's text.
        """
        path = self._file(name)
        src_t = tensor.detach().contiguous().view(-1).view(torch.uint8)
        nbytes = src_t.numel()
        disk = _padded(nbytes) if self.direct else nbytes
        with self._lock:
            old = self._entries.get(name)
            used = self.bytes_on_disk - (old.disk_bytes if old else 0)
            if self.quota_bytes is not None and used + disk > self.quota_bytes:
                raise DiskFull(f"disk full: writing {name!r} ({disk} bytes) would exceed quota_bytes="
                               f"{self.quota_bytes} ({used} bytes in use)")
            self._entries.pop(name, None)
            self._writing.add(name)
            self._busy.enter("write")
        in_place = old is not None and old.disk_bytes == disk
        try:
            flags = os.O_CREAT | os.O_WRONLY | (0 if in_place else os.O_TRUNC)
            fd = os.open(path, flags | (os.O_DIRECT if self.direct else 0), 0o600)
            try:
                if self.direct:
                    self._write_direct(fd, src_t, disk, in_place)
                else:
                    _pwrite_all(fd, memoryview(src_t.numpy()), 0)
                    os.fsync(fd)
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)
        except BaseException as e:
            path.unlink(missing_ok=True)
            if isinstance(e, OSError):
                raise _as_labkit(e, str(path), "writing") from e
            raise
        finally:
            with self._lock:
                self._writing.discard(name)
                self._busy.leave("write", self.counters)
        crc = zlib.crc32(src_t.numpy()) if self.checksum else None
        with self._lock:
            self._entries[name] = _Entry(tensor.dtype, tuple(tensor.shape), nbytes, disk, crc)
            c = self.counters
            c.bytes_written += nbytes
            c.padded_written += disk

    def _write_direct(self, fd: int, src_t: torch.Tensor, disk: int, in_place: bool) -> None:
        if not in_place:
            os.posix_fallocate(fd, 0, disk)  # chunks then land inside the file: they need not extend it in turn
        span = _aligned_span(src_t, disk)
        src, nbytes = src_t.numpy(), src_t.numel()
        buf = None if span is not None else self._buffers.take(disk)
        try:
            if buf is None:  # page-aligned already (e.g. a tensor read into page-aligned ``out``): no copy
                view, stage = memoryview(span.numpy()), None
            else:
                view = memoryview(buf)
                stage = np.frombuffer(buf, dtype=np.uint8)
                stage[nbytes:] = 0

            def put(off: int, n: int) -> None:
                end = min(off + n, nbytes)
                if stage is not None and end > off:  # torch's copy: numpy's here made the step's compute 3-5x slower
                    torch.from_numpy(stage[off:end]).copy_(torch.from_numpy(src[off:end]))
                _pwrite_all(fd, view[off:off + n], off)

            self._parallel(put, disk)
        finally:
            view = stage = None
            if buf is not None:
                self._buffers.give(buf)

    def read(self, name: str, out: torch.Tensor | None = None) -> torch.Tensor:
        """Read ``name`` back (into ``out`` when given); a missing, truncated or unreadable file raises LabkitError."""
        path = self._file(name)
        entry = self._entries.get(name)
        if entry is None:
            why = "is still being written" if name in self._writing else "is missing"
            raise LabkitError(f"offload file {path} {why} (name {name!r})")
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            raise LabkitError(f"offload file {path} is missing (name {name!r})") from None
        if size < entry.disk_bytes:
            raise LabkitError(f"offload file {path} is truncated: {size} bytes on disk, expected {entry.disk_bytes}")
        if out is not None and (out.dtype != entry.dtype or tuple(out.shape) != entry.shape
                                or not out.is_contiguous()):
            raise LabkitError(f"out must be a contiguous {entry.dtype} tensor of shape {entry.shape} for {name!r}")
        with self._lock:
            self._busy.enter("read")
        try:
            out = self._read_file(path, entry, out)
        except OSError as e:
            raise _as_labkit(e, str(path), "reading") from e
        finally:
            with self._lock:
                self._busy.leave("read", self.counters)
        if entry.crc is not None and zlib.crc32(out.view(-1).view(torch.uint8).numpy()) != entry.crc:
            raise LabkitError(f"offload file {path} failed its checksum: the file was changed or corrupted")
        with self._lock:
            c = self.counters
            c.bytes_read += entry.nbytes
            c.padded_read += entry.disk_bytes
        return out

    def _read_file(self, path: Path, entry: _Entry, out: torch.Tensor | None) -> torch.Tensor:
        """Straight into ``out`` when the disk can write there, else via a staging buffer, chunk by chunk.

        Without ``out`` the result is a fresh tensor; staging memory never leaves the store, so
        it is reused safely, and each chunk's copy overlaps the next chunk's read.
        """
        size = entry.disk_bytes
        if out is None:
            out = torch.empty(entry.shape, dtype=entry.dtype)
        dst = out.view(-1).view(torch.uint8)
        span = dst if not self.direct else _aligned_span(dst, size)
        buf = self._buffers.take(max(size, BLOCK)) if span is None else None
        fd = os.open(path, os.O_RDONLY | (os.O_DIRECT if self.direct else 0))
        try:
            view = memoryview(span.numpy()) if buf is None else memoryview(buf)
            stage = None if buf is None else np.frombuffer(buf, dtype=np.uint8)
            got_to = dst.numpy()

            def get(off: int, n: int) -> int:
                got = _pread_all(fd, view[off:off + n], off)
                end = min(off + got, entry.nbytes)
                if stage is not None and end > off:
                    torch.from_numpy(got_to[off:end]).copy_(torch.from_numpy(stage[off:end]))
                return got

            got = sum(self._parallel(get, size))
            if not self.direct:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
            view = stage = None
            if buf is not None:
                self._buffers.give(buf)
        if got < size:
            raise LabkitError(f"offload file {path} is truncated: read {got} of {size} bytes")
        return out
