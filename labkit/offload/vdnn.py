"""vDNN: saved activations offloaded in forward and prefetched in backward (Rhu et al., MICRO 2016).

vDNN's observation: an activation saved in forward is not touched again until backward
reaches its layer, so it can leave the device right after it is made and come back just
before it is used; backward visits layers in reverse, so the next tensor needed is known
and can be read ahead while the current layer computes. Here that runs for real on the
tiny GPT through ``torch.autograd.graph.saved_tensors_hooks``:

* ``store="dram"``: a copy into a separate host buffer. On a GPU this is a pinned-memory
  D2H copy; on this CPU-only build it is a plain copy into another buffer, the same bytes;
* ``store="disk"``: one raw file per storage in a :class:`labkit.offload.disk.store.DiskStore`
  (``O_DIRECT`` where the file system allows it, so the bytes reach the disk rather than the
  page cache); bytes are written as a uint8 view of the storage, so bf16 round-trips bit
  for bit, like the int16 view in the field notes;
* a background thread reads offloaded tensors in backward order (from the trace of the
  first iteration, or reversed save order without one), at most ``lookahead`` ahead; a use
  that finds its tensor not yet read is a *stall*.

A file that is missing, truncated (also while backward runs) or unreadable (``EIO``), or a
full disk, raises :class:`OffloadError` in the training step, naming the file, the tensor
and the OS's reason, whichever thread hit it; the prefetch thread stops and no offload file
is left behind.

Which tensors go (``OffloadPolicy``): ``all`` (every saved storage of at least
``min_bytes``), ``conv-like`` (vDNN's ``vDNN_conv``: only the inputs saved by the
compute-heavy modules, here ``Linear`` and ``MatMul``, whose compute can hide the copy),
``largest-k`` (the k largest storages of the trace) and ``modules`` (fnmatch patterns
of module names, e.g. ``"*.attn.core.softmax"`` for the attention probabilities).

Whole storages move, so views (q, k, v of one buffer) are restored as views of one copy
and the gradients are bit-identical to the plain run. Originals are kept referenced until
forward ends, only so that a storage address cannot be reused while it names an offloaded
tensor; the budget counts them as gone once copied, as vDNN's device would.
"""

from __future__ import annotations

import fnmatch
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn as nn

from labkit.errors import LabkitError, require_choice, require_positive
from labkit.hardware import gpu as find_gpu
from labkit.hardware import link as find_link
from labkit.hardware import transfer_time
from labkit.offload.budget import DeviceOutOfMemory, ResidentCounter, SavedHooks, _Held, model_state_bytes
from labkit.offload.disk.io import DiskFull
from labkit.offload.disk.store import DiskStore
from labkit.offload.trace import Trace
from labkit.rig.step import StepHooks, forward_backward, training_step
from labkit.rig.train import batch_tensors
from labkit.sim import Task, Timeline, simulate

POLICIES = ("all", "conv-like", "largest-k", "modules")
STORES = ("dram", "disk")
COMPUTE_HEAVY = ("Linear", "MatMul")


class OffloadError(LabkitError):
    """An offloaded tensor could not be written or read back; names the file and the tensor."""


class OffloadDiskFull(OffloadError):
    """The offload directory's quota (or the disk) is full."""


@dataclass(frozen=True)
class OffloadPolicy:
    """Which saved storages leave the device; see the module docstring for the kinds."""

    kind: str = "all"
    min_bytes: int = 0
    k: int = 0
    modules: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        require_choice("policy", self.kind, POLICIES)
        if self.kind == "largest-k":
            require_positive("k", self.k)
        if self.kind == "modules" and not self.modules:
            raise LabkitError("modules must name at least one module pattern for policy 'modules'")

    def wants(self, module: str, module_type: str, nbytes: int) -> bool:
        if nbytes < self.min_bytes:
            return False
        if self.kind == "conv-like":
            return module_type in COMPUTE_HEAVY
        if self.kind == "modules":
            return any(fnmatch.fnmatchcase(module, p) for p in self.modules)
        return True

    def select(self, trace: Trace) -> set[int]:
        """Indices of the trace entries this policy offloads."""
        ok = [e for e in trace.entries if self.wants(e.module, e.module_type, e.nbytes)]
        if self.kind == "largest-k":
            ok = sorted(ok, key=lambda e: (-e.nbytes, e.index))[: self.k]
        return {e.index for e in ok}


@dataclass
class _Slot:
    index: int
    module: str
    nbytes: int
    path: Path | None = None
    name: str | None = None
    buf: torch.Tensor | None = None
    data: torch.Tensor | None = None
    error: LabkitError | None = None
    state: str = "pending"  # pending, reading, ready
    used: bool = False
    in_time: bool | None = None

    def label(self) -> str:
        return f"saved tensor #{self.index} of module {self.module or '<root>'!r} ({self.nbytes:,} bytes)"


@dataclass
class OffloadStats:
    """What one run moved: bytes, and whether each prefetch beat its use."""

    bytes_offloaded: int = 0
    bytes_written: int = 0
    bytes_read: int = 0
    tensors_offloaded: int = 0
    stalls: int = 0
    in_time: int = 0
    offloaded_indices: list[int] = field(default_factory=list)


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
        slot = _Slot(idx, module, nbytes)
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
    def _write(self, slot: _Slot, u8: torch.Tensor) -> None:
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

    def _read(self, slot: _Slot) -> torch.Tensor:
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

    def _load(self, slot: _Slot) -> None:
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

    def _unlink(self, slot: _Slot) -> None:
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


def _offload_hooks(off: Offloader) -> StepHooks:
    """The offloader in a step: a fresh start with the batch left out, the prefetcher once forward ends."""

    @contextmanager
    def around(batch) -> Iterator[None]:
        off.begin_step(*batch_tensors(batch))
        try:
            yield
        finally:
            off.end_step()

    return StepHooks(around=around, after_forward=lambda _: off.begin_backward())


def offloaded_forward_backward(trainer, off: Offloader, step: int | None = None) -> torch.Tensor:
    """Loss of batch ``step`` with gradients in ``.grad``, saved activations offloaded by ``off``."""
    i = trainer.steps_done if step is None else step
    return forward_backward(trainer, i, _offload_hooks(off)).detach()


def offloaded_step(trainer, off: Offloader, step: int | None = None) -> float:
    """One full training step (optimizer included) with offload; returns the loss."""
    return training_step(trainer, step, _offload_hooks(off))


def timed(fn, *args) -> tuple[object, float]:
    """(result, wall-clock seconds): for printing, never for asserting."""
    t0 = time.perf_counter()
    out = fn(*args)
    return out, time.perf_counter() - t0


def predict_vdnn(offload_bytes_per_layer: float, forward_flops_per_layer: float, n_layers: int,
                 gpu: str = "A100-80GB", link: str | None = None, efficiency: float = 0.5,
                 dtype: str = "bf16") -> Timeline:
    """vDNN on a real GPU and link, as a :class:`labkit.sim.Timeline` (streams compute, d2h, h2d).

    Compute per layer is FLOPs / (peak * efficiency), backward twice forward; a copy is
    ``transfer_time`` over the GPU's PCIe link unless ``link`` names another. As in vDNN,
    layer i's offload starts when its forward ends and overlaps the next layer's forward;
    layer i+2 waits for it (two layers' buffers on the device). The prefetch of layer i
    starts when backward of layer i+1 starts, and backward of layer i waits for it. The last
    layer stays on the device: its backward comes first, right after its forward.
    Compute idle time is the time added: ``stall_seconds``.
    """
    require_positive("n_layers", n_layers)
    require_positive("efficiency", efficiency, integer=False)
    dev = find_gpu(gpu)
    wire = find_link(link or dev.pcie)
    t_f = forward_flops_per_layer / (dev.peak_flops[dtype] * efficiency)
    t_x = transfer_time(offload_bytes_per_layer, wire)
    tasks, L = [], n_layers
    for i in range(L):
        deps = (f"d2h {i - 2}",) if i >= 2 else ()
        tasks.append(Task(f"F {i}", "compute", t_f, deps, "F", {"layer": i}))
        if i < L - 1:
            meta = {"layer": i, "bytes": offload_bytes_per_layer}
            tasks.append(Task(f"d2h {i}", "d2h", t_x, (f"F {i}",), "d2h", meta))
    for i in reversed(range(L)):
        deps: tuple[str, ...] = ()
        if i < L - 1:
            start = (f"B {i + 2}",) if i + 2 < L else (f"F {L - 1}",)
            tasks.append(Task(f"h2d {i}", "h2d", t_x, (*start, f"d2h {i}"), "h2d", {"layer": i}))
            deps = (f"h2d {i}",)
        tasks.append(Task(f"B {i}", "compute", 2 * t_f, deps, "B", {"layer": i}))
    return simulate(tasks)


def stall_seconds(timeline: Timeline) -> float:
    """Time the compute stream waits for copies: the seconds offload adds to the step."""
    return timeline.makespan - timeline.busy("compute")
