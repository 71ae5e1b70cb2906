"""The offloader: hooks that copy saved activations out in forward, a thread that prefetches them in backward."""

from __future__ import annotations

import threading
from pathlib import Path

import torch
import torch.nn as nn

from labkit.errors import LabkitError, require_choice, require_positive
from labkit.offload.budget import DeviceOutOfMemory, ResidentCounter, SavedHooks, _Held, model_state_bytes
from labkit.offload.disk.io import DiskFull
from labkit.offload.disk.store import DiskStore
from labkit.offload.trace import Trace
from labkit.offload.vdnn.policy import OffloadPolicy
from labkit.offload.vdnn.slots import OffloadDiskFull, OffloadError, OffloadStats, Slot

STORES = ("dram", "disk")


class Offloader(SavedHooks):
    """Context manager: offload saved activations of ``model`` to DRAM or disk, prefetch in backward.

    Use :func:`offloaded_forward_backward` inside it, once per step. ``counter`` is the
    budgeted device's: offloaded tensors stop counting once copied out.
    """

    def __init__(self, model: nn.Module, store: str = "dram", policy: OffloadPolicy | None = None,
                 trace: Trace | None = None, capacity: int | None = None, states: int | None = None,
                 lookahead: int = 2, root: str | Path | None = None, quota_bytes: int | None = None) -> None:
        super().__init__(model)
        self._base_skip = set(self.skip)  # parameters and buffers; each step adds its batch
        self.store = require_choice("store", store, STORES)
        self.policy = policy or OffloadPolicy()
        self.trace = trace
        if self.policy.kind == "largest-k" and trace is None:
            raise LabkitError("policy 'largest-k' needs the trace of a first iteration (trace=...)")
        self.selected = None if trace is None else self.policy.select(trace)
        self.capacity, self.states = capacity, model_state_bytes(model) if states is None else states
        self.lookahead = require_positive("lookahead", lookahead)
        self.root, self.quota = root, quota_bytes
        self.dir: Path | None = None
        self._disk: DiskStore | None = None
        self.stats = OffloadStats()
        self.counter = ResidentCounter(capacity, self.states)
        self.peak = self.counter.peak
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._reset()

    def _reset(self) -> None:
        self.gen += 1
        self.refs, self.slots, self.by_index, self.views = {}, {}, {}, {}
        self._n_new, self._ahead, self._stop, self._on_disk = 0, 0, False, 0
        self._forward_refs: list[torch.Tensor] = []
        self.counter = ResidentCounter(self.capacity, self.states)

    # -- the step ---------------------------------------------------------------------------
    def begin_step(self, *batch: torch.Tensor) -> None:
        self._reset()
        self.skip = set(self._base_skip)
        self.exclude(*batch)

    def _new(self, key: int, t: torch.Tensor, module: str, nbytes: int) -> None:
        idx, mtype = self._n_new, self.types.get(module, "")
        self._n_new += 1
        if self.trace is not None:
            e = self.trace.entries[idx] if idx < len(self.trace.entries) else None
            if e is None or (e.module, e.nbytes) != (module, nbytes):
                raise LabkitError(f"this iteration does not repeat the trace at saved tensor #{idx} "
                                  f"(module {module!r}, {nbytes} bytes); trace the model again")
        want = idx in self.selected if self.selected is not None else self.policy.wants(module, mtype, nbytes)
        self._forward_refs.append(t)
        self.counter.alloc(key, nbytes, module)
        if not want:
            return
        slot = Slot(idx, module, nbytes)
        u8 = torch.empty(0, dtype=torch.uint8).set_(t.untyped_storage(), 0, (nbytes,), (1,))
        self._write(slot, u8)
        self.slots[key], self.by_index[idx] = slot, key
        self.counter.free(key)
        self.stats.bytes_offloaded += nbytes
        self.stats.tensors_offloaded += 1
        self.stats.offloaded_indices.append(idx)

    def _hold(self, key: int, t: torch.Tensor) -> _Held:
        if key not in self.slots:
            return _Held(self, key, t)
        return _Held(self, key, None, (t.dtype, tuple(t.shape), t.stride(), t.storage_offset()))

    def _restore(self, held: _Held) -> torch.Tensor:
        if held.tensor is not None:
            return held.tensor
        u8 = self._fetch(held.key)
        dtype, shape, stride, offset = held.meta
        base = u8.storage_offset() // dtype.itemsize  # the copy may start inside its own storage (page alignment)
        return torch.empty(0, dtype=dtype).set_(u8.untyped_storage(), base + offset, shape, stride)

    def _released(self, key: int) -> None:
        with self._cond:
            slot = self.slots.get(key)
            if slot is not None:
                slot.data = slot.buf = None
            self.counter.free(key)

    def begin_backward(self) -> None:
        """Forward is over: let the originals go and start the prefetch thread."""
        self._forward_refs.clear()
        self.peak = max(self.peak, self.counter.peak)
        if self.trace is not None:
            order = [self.by_index[i] for i in self.trace.fetch_order() if i in self.by_index]
        else:
            order = list(reversed(self.slots))
        self._thread = threading.Thread(target=self._prefetch, args=(order,), daemon=True,
                                        name="labkit-vdnn-prefetch")
        self._thread.start()

    def end_step(self) -> None:
        """Join the prefetcher and drop what is left (files included)."""
        self._join()
        self.peak = max(self.peak, self.counter.peak)
        for slot in self.slots.values():
            self._unlink(slot)
        self._reset()

    # -- moving bytes -----------------------------------------------------------------------
    def _write(self, slot: Slot, u8: torch.Tensor) -> None:
        if self.store == "dram":
            slot.buf = u8.clone()
        else:
            disk = self._disk
            assert disk is not None and disk.path is not None, "use the Offloader as a context manager"
            slot.name = f"{self.gen:04d}-{slot.index:05d}-{slot.module or 'root'}.bin"
            slot.path = disk.path / slot.name
            if self.quota is not None and self._on_disk + slot.nbytes > self.quota:
                raise OffloadDiskFull(f"offload disk full writing {slot.path}: {slot.label()} does not fit the "
                                      f"quota of {self.quota:,} bytes ({self._on_disk:,} in use)")
            try:
                disk.write(slot.name, u8)
            except LabkitError as err:
                cls = OffloadDiskFull if isinstance(err, DiskFull) else OffloadError
                raise cls(f"cannot write {slot.path} for {slot.label()}: {err}") from err
            self._on_disk += slot.nbytes
        self.stats.bytes_written += slot.nbytes

    def _read(self, slot: Slot) -> torch.Tensor:
        if self.store == "dram":
            if slot.buf is None:
                raise OffloadError(f"the DRAM copy of {slot.label()} is gone")
            return slot.buf.clone()
        if self._disk is None or slot.name is None:
            raise OffloadError(f"offload file {slot.path} of {slot.label()} is missing: the offloader was closed")
        try:
            return self._disk.read(slot.name)
        except LabkitError as err:
            raise OffloadError(f"{slot.label()} could not be read back in backward: {err}") from err

    def _load(self, slot: Slot) -> None:
        """Read one slot (prefetcher or consumer); the caller has marked it 'reading'.

        Whatever goes wrong is kept on the slot and raised by the backward that uses it: an
        error on the prefetch thread must reach the training step, and never leave it waiting.
        """
        data, error = None, None
        try:
            data = self._read(slot)
        except LabkitError as err:
            error = err
        except Exception as err:  # not ours (a bug, an injected fault): still the step's error, named
            error = OffloadError(f"reading {slot.label()} from {slot.path} failed: {type(err).__name__}: {err}")
            error.__cause__ = err
        finally:
            with self._cond:
                if data is not None:
                    self.stats.bytes_read += slot.nbytes
                    self._unlink(slot)
                    try:
                        self.counter.alloc(self.by_index[slot.index], slot.nbytes, slot.module, "prefetched tensor")
                    except DeviceOutOfMemory as err:
                        data, error = None, err
                elif error is None:
                    error = OffloadError(f"reading {slot.label()} was interrupted")
                slot.data, slot.error, slot.state = data, error, "ready"
                self._cond.notify_all()

    def _prefetch(self, order: list[int]) -> None:
        for key in order:
            with self._cond:
                while not self._stop and self._ahead >= self.lookahead:
                    self._cond.wait()
                slot = self.slots[key]
                if self._stop:
                    return
                if slot.state != "pending":
                    continue
                slot.state = "reading"
                self._ahead += 1
            self._load(slot)
            if slot.error is not None:  # backward fails at this tensor: reading further is wasted
                return

    def _fetch(self, key: int) -> torch.Tensor:
        with self._cond:
            slot = self.slots[key]
            first = not slot.used
            slot.used = True
            if first:
                slot.in_time = slot.state == "ready"
                self.stats.in_time += slot.in_time
                self.stats.stalls += not slot.in_time
            mine = slot.state == "pending"
            if mine:
                slot.state = "reading"
            elif first:
                self._ahead -= 1
                self._cond.notify_all()
        if mine:
            self._load(slot)
        with self._cond:
            while slot.state != "ready":
                self._cond.wait(timeout=1.0)
                thread = self._thread
                if slot.state == "reading" and not mine and (thread is None or not thread.is_alive()):
                    raise OffloadError(f"the prefetch thread stopped while it was reading {slot.label()}")
            if slot.error is not None:
                raise slot.error
            self.peak = max(self.peak, self.counter.peak)
            return slot.data

    def _unlink(self, slot: Slot) -> None:
        if slot.name is not None:
            self._on_disk -= slot.nbytes
            if self._disk is not None and self._disk.path is not None:
                self._disk.remove(slot.name)
            slot.name = None

    def _join(self) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def __enter__(self) -> Offloader:
        if self.store == "disk":
            self._disk = DiskStore(self.root)
            self.dir = self._disk.path
        try:
            return super().__enter__()
        except BaseException:
            self._close_disk()
            raise

    def __exit__(self, *exc) -> None:
        try:
            self._join()
            super().__exit__(*exc)
            self._reset()
        finally:
            self._close_disk()

    def _close_disk(self) -> None:
        if self._disk is not None:
            self._disk.close()  # removes the directory and every file in it
            self._disk, self.dir = None, None
