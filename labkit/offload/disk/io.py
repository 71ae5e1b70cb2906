"""Aligned I/O primitives of the offload disk: ``O_DIRECT`` detection, whole-buffer reads and writes, errors.

Files written with ``O_DIRECT`` are padded to the 4096-byte block. Dropping a file's pages from
the cache uses ``posix_fadvise(DONTNEED)`` where the OS has it (Linux); elsewhere (macOS) the
buffered path is labelled without it, so a reader knows the cache may have served the bytes.
"""

from __future__ import annotations

import errno
import mmap
import os
import shutil
import stat
import tempfile
from pathlib import Path

import torch

from labkit.errors import LabkitError

BLOCK = 4096  # O_DIRECT alignment: offsets, lengths and buffer addresses
MiB = 2**20
GiB = 2**30
CAN_DROP_CACHE = hasattr(os, "posix_fadvise") and hasattr(os, "POSIX_FADV_DONTNEED")
NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
BUFFERED = "buffered+fsync+DONTNEED" if CAN_DROP_CACHE else "buffered+fsync"


class DiskFull(LabkitError):
    """The disk (``ENOSPC``/``EDQUOT``) or the store's quota is full."""


def drop_cache(fd: int) -> None:
    """Ask the OS to drop ``fd``'s cached pages, so the next read reaches the disk; a no-op where it cannot."""
    if CAN_DROP_CACHE:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)


def padded(n: int) -> int:
    return max(BLOCK, -(-n // BLOCK) * BLOCK)


def direct_io_supported(directory: str | Path) -> bool:
    """Whether files under ``directory`` can be opened with ``O_DIRECT`` and written aligned."""
    if not hasattr(os, "O_DIRECT"):
        return False
    try:
        probe = Path(tempfile.mkdtemp(prefix="labkit-probe-", dir=directory))
    except OSError:
        return False
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


def private_dir(root: str | Path | None, prefix: str) -> Path:
    """A fresh private folder under ``root`` (the system's temp folder if None), or one LabkitError naming
    ``root`` and why: missing, not a folder, read-only, a NUL byte or a name too long raised raw errors before."""
    base = Path(root or tempfile.gettempdir())
    shown = repr(str(base)) if len(str(base)) <= 80 else f"{str(base)[:60]!r}... ({len(str(base))} characters)"
    if "\0" in str(base):
        raise LabkitError(f"root must be a folder path without a NUL byte (got {shown})")
    try:
        if not base.is_dir():
            raise LabkitError(f"root must be an existing directory (got {shown})")
        return Path(tempfile.mkdtemp(prefix=prefix, dir=base))
    except OSError as e:
        raise LabkitError(f"root must be a folder labkit can write: {e.strerror or e} (got {shown})") from None


def check_name(name: str, directory: Path) -> str:
    """``name`` if it can be one plain file in ``directory``: not empty, no '/', no leading '.', no NUL byte,
    at most the filesystem's NAME_MAX bytes (255 on ext4), so the OS never answers with a raw error."""
    if not isinstance(name, str) or not name or "/" in name or name.startswith("."):
        raise LabkitError(f"name must be a plain file name without '/' (got {name!r:.80})")
    if "\0" in name:
        raise LabkitError(f"name must not contain a NUL byte (got {name!r:.80})")
    try:
        limit = os.pathconf(directory, "PC_NAME_MAX")
    except (OSError, ValueError):
        limit = 255
    if len(os.fsencode(name)) > limit:
        raise LabkitError(f"name must be at most {limit} bytes, the filesystem's limit (got {len(os.fsencode(name))} "
                          f"bytes: {name[:40]!r}...)")
    return name


def as_labkit(e: OSError, path: str, doing: str) -> LabkitError:
    """The OS error as a LabkitError naming the file, what was done and the errno's text."""
    if e.errno in (errno.ENOSPC, errno.EDQUOT):
        return DiskFull(f"disk full while writing {path}: free space on the offload disk or lower the model size")
    text = e.strerror or (os.strerror(e.errno) if e.errno else str(e) or type(e).__name__)
    code = f"[Errno {e.errno}] " if e.errno else ""
    return LabkitError(f"I/O error {doing} offload file {path}: {code}{text}")


def pwrite_all(fd: int, view: memoryview, offset: int) -> None:
    while len(view):
        n = os.pwritev(fd, [view], offset)
        view, offset = view[n:], offset + n


def pread_all(fd: int, view: memoryview, offset: int) -> int:
    got = 0
    while got < len(view):
        n = os.preadv(fd, [view[got:]], offset + got)
        if n == 0:
            break
        got += n
    return got


def aligned_span(t: torch.Tensor, size: int) -> torch.Tensor | None:
    """``size`` bytes of ``t``'s storage from its first byte, if that byte is page-aligned and they exist."""
    storage = t.untyped_storage()
    if t.data_ptr() % BLOCK or t.storage_offset() + size > storage.nbytes() or t.numel() == 0:
        return None
    return torch.empty(0, dtype=torch.uint8).set_(storage, t.storage_offset(), (size,))




def check_file(path: Path, want: int) -> None:
    """A written file is still a regular file of the size written: not missing, a symlink, cut or grown."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        raise LabkitError(f"offload file {path} is missing") from None
    if not stat.S_ISREG(st.st_mode):
        raise LabkitError(f"offload file {path} was replaced by a symlink or other non-file: it is never followed")
    if st.st_size != want:
        kind = "truncated" if st.st_size < want else "grown"
        raise LabkitError(f"offload file {path} is {kind}: {st.st_size} bytes on disk, expected {want}")


def unmap(buf: mmap.mmap) -> None:
    """Close an anonymous map; one still viewed (e.g. from an exception's traceback) is left to the collector."""
    try:
        buf.close()
    except BufferError:
        pass
