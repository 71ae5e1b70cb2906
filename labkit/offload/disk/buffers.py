"""Page-aligned staging memory lent per request, and what the disk achieved (payload bytes, busy seconds)."""

from __future__ import annotations

import mmap
import threading
import time
from dataclasses import dataclass

from labkit.offload.disk.io import unmap


class Buffers:
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
                unmap(self._free.pop(0))

    def close(self) -> None:
        with self._lock:
            bufs, self._free = self._free, []
        for b in bufs:
            unmap(b)


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


class Busy:
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
