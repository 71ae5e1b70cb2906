"""One real training step counted by the lab's counters, on real or fake tensors, in one pass.

``labkit.measure.measure_step`` and ``whole_step_peak`` each run a step of their own; a full-size model
under torch's ``FakeTensorMode`` (``torch._subclasses.fake_tensor``: tensors that carry shape, dtype and
device but no data, so a 70B model's step allocates no weight) is worth one step only. ``record_step``
runs the step once with both counters on: ``labkit.measure.saved.SavedTensorRecorder`` (what autograd
keeps, by module and layer) and a ``labkit.measure.peak.LiveBytes`` that also logs every storage it
sees arrive and go (``StepRecorder``: the step's timeline, ``labkit.measure.timeline``) and the bytes
the CUDA caching allocator would hold for the same storages (each rounded up to 512 bytes,
``c10/cuda/CUDACachingAllocator.cpp``'s ``round_size``), which is the one allocator term a CPU run can
count exactly. The step is ``labkit.rig.step``'s forward_backward and optimizer_step, as
``training_step`` runs them, without ``loss.item()``, which a fake tensor cannot answer.

A fake storage has no address (``data_ptr()`` is 0), so the counters' storage key is switched, while a
fake step runs, to the storage's own identity (``fake_keys``); for real tensors the two keys are the same
storage, which the equivalence tests check (``tests/test_fake_equivalence.py``).
"""

from __future__ import annotations

import time
import warnings
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch

import labkit.measure.peak as _peak
import labkit.measure.saved as _saved
from labkit.measure.peak import LiveBytes, WholeStepPeak, _model_state_tensors
from labkit.measure.saved import SavedTensorRecorder, StepMemory, optimizer_bytes, unique_bytes
from labkit.rig.blocks import layer_of

ROUND = 512  # the CUDA caching allocator's block granularity (round_size)


def _impl_key(t: torch.Tensor) -> int:
    """The storage's identity (its StorageImpl), the same for every view of it, real or fake."""
    return t.untyped_storage()._cdata


_TRACING_USERS = ("transformers.masking_utils", "transformers.modeling_attn_mask_utils", "transformers.modeling_utils")


@contextmanager
def fake_keys() -> Iterator[None]:
    """While the block runs: the lab's counters keyed by storage identity instead of address, and transformers
    told that a fake tensor is not a trace.

    transformers' ``is_tracing(tensor)`` answers True for any fake tensor, and its mask code then builds an
    explicit (b, 1, s, s) causal mask for sdpa (and repeats K and V to every head) where a real step passes
    ``is_causal``: a fake step would measure another model. Only the global checks (dynamo, jit, stream
    capture) are kept, which is what a real eager step sees.
    """
    import importlib

    from transformers.utils.import_utils import is_tracing

    def untraced(tensor=None) -> bool:
        return is_tracing()

    mods = [importlib.import_module(m) for m in _TRACING_USERS]
    old = _saved._storage_key, _peak._storage_key, [getattr(m, "is_tracing", None) for m in mods]
    packed = mods[0].find_packed_sequence_indices
    _saved._storage_key = _peak._storage_key = _impl_key
    for m in mods:
        if hasattr(m, "is_tracing"):
            m.is_tracing = untraced
    mods[0].find_packed_sequence_indices = _unpacked
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Accessing the data pointer of FakeTensor")
            yield
    finally:
        _saved._storage_key, _peak._storage_key = old[0], old[1]
        for m, f in zip(mods, old[2], strict=True):
            if f is not None:
                m.is_tracing = f
        mods[0].find_packed_sequence_indices = packed


def _unpacked(position_ids: torch.Tensor) -> None:
    """transformers' packed-sequence test, its temporaries made as a real step makes them, and its answer (one
    sequence a row: the lab's batches pass no position ids) given instead of read off data a fake tensor lacks."""
    first = position_ids[:, :1] - 1
    mask = (torch.diff(position_ids, prepend=first, dim=-1) != 1).cumsum(-1)
    (mask[:, -1] == 0).all()
    return None


def fake_mode():
    """torch's FakeTensorMode, taking the lab's real constant tables (NF4's code book) as inputs."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    return FakeTensorMode(allow_non_fake_inputs=True)


def cuda_rounded(nbytes: int) -> int:
    """Bytes the CUDA caching allocator books for a request of ``nbytes`` (512-byte blocks, 512 at least)."""
    return max(ROUND, -(-nbytes // ROUND) * ROUND) if nbytes else 0


@dataclass(frozen=True)
class Event:
    """A storage arriving (``delta`` > 0) or going, the step's phase then and where the step was."""

    uid: int
    delta: int
    phase: str
    where: str


class StepRecorder(LiveBytes):
    """``LiveBytes`` that also logs each arrival and free (``events``) and counts 512-byte-rounded bytes."""

    def __init__(self, start: list[torch.Tensor], device: torch.device, ignore: tuple[torch.Tensor, ...] = (),
                 where: Callable[[], str] = lambda: "") -> None:
        self.events: list[Event] = []
        self.rounded = self.rounded_peak = 0
        self.where, self.uids, self._next = where, {}, 0
        super().__init__(start, device, ignore)
        self.rounded_peak = self.rounded
        self.start_uids = set(self.uids.values())

    def _freed(self, key: int, nbytes: int, ref) -> None:
        if self._refs.get(key) is ref:
            self.rounded -= cuda_rounded(nbytes)
            self.events.append(Event(self.uids.pop(key), -nbytes, self.phase, self.where()))
        super()._freed(key, nbytes, ref)

    def _add(self, t) -> None:
        if not torch.is_tensor(t) or t.device != self.device or t.is_meta:
            return
        st = t.untyped_storage()
        key = _peak._storage_key(t) or id(st)
        if key in self._ignore or (key in self._refs and self._refs[key]() is st):
            return
        nbytes = st.nbytes()
        self._refs[key] = weakref.ref(st, lambda r, k=key, n=nbytes: self._freed(k, n, r))
        self.uids[key], self._next = self._next, self._next + 1
        self.events.append(Event(self.uids[key], nbytes, self.phase, self.where()))
        self.current += nbytes
        self.rounded += cuda_rounded(nbytes)
        self.rounded_peak = max(self.rounded_peak, self.rounded)
        if self.current > self.peak:
            self.peak, self.peak_phase = self.current, self.phase
        self.by_phase[self.phase] = max(self.by_phase.get(self.phase, 0), self.current)


class _LayerRecorder(SavedTensorRecorder):
    """The saved-tensor recorder, telling the step recorder which layer backward has reached."""

    backward_at = ""

    def _unpack(self, packed):
        if torch.is_tensor(packed):
            layers = self.layers_seen.get(_saved._storage_key(packed), set()) - {None}
            if len(layers) == 1:
                self.backward_at = f"{self.blocks}.{next(iter(layers))}"
        return packed

    def where(self) -> str:
        if self.module:
            return self.module
        node = torch._C._current_autograd_node()
        return f"{self.backward_at} {node.name()}".strip() if node is not None else self.backward_at


@dataclass
class RecordedStep:
    """One step as the lab's counters saw it: categories, saved tensors, the whole-step peak, the event log."""

    memory: StepMemory
    peak: WholeStepPeak
    rounded_peak: int  # the same storages in 512-byte CUDA blocks, at their own peak
    events: list[Event]
    kinds: dict[int, str]  # uid -> parameters, gradients, optimizer states or activations (else temporaries)
    blocks: str
    seconds: float
    start: int = 0
    extra: dict = field(default_factory=dict)


def _kinds_at_start(trainer, tracker: StepRecorder) -> dict[int, str]:
    model, opt = trainer.model, trainer.optimizer
    groups = {"parameters": [*model.parameters(), *model.buffers()],
              "optimizer states": [*getattr(opt, "master", []),
                                   *(t for s in opt.state.values() for t in s.values() if torch.is_tensor(t))]}
    out = {}
    for kind, tensors in groups.items():
        for t in tensors:
            uid = tracker.uids.get(_peak._storage_key(t))
            if uid is not None:
                out.setdefault(uid, kind)
    return out


def record_step(trainer, step: int | None = None) -> RecordedStep:
    """Run one training step of ``trainer`` (after a warm-up step, so the optimizer states exist) and count it."""
    from labkit.rig.step import StepHooks, forward_backward, optimizer_step
    from labkit.rig.train import batch_tensors, blocks_of

    model, i, t0 = trainer.model, trainer.steps_done if step is None else step, time.perf_counter()
    model.train()
    corpus = getattr(trainer.data, "tokens", None)
    recorders: list[_LayerRecorder] = []
    tracker = StepRecorder(_model_state_tensors(trainer), trainer.device, () if corpus is None else (corpus,),
                           where=lambda: recorders[0].where() if recorders else "")
    kinds = _kinds_at_start(trainer, tracker)
    grads: list[int] = []

    def record(batch):
        recorders.append(_LayerRecorder(model, exclude=tuple(batch_tensors(batch)), blocks=blocks_of(trainer)))
        return recorders[0]

    def saved_now(_loss) -> None:
        for key in recorders[0].records:
            if key in tracker.uids:
                kinds.setdefault(tracker.uids[key], "activations")

    def read_grads(_loss) -> None:
        params = list(model.parameters())
        grads.append(unique_bytes(p.grad for p in params))
        for p in params:
            if p.grad is not None and _peak._storage_key(p.grad) in tracker.uids:
                kinds.setdefault(tracker.uids[_peak._storage_key(p.grad)], "gradients")

    hooks = StepHooks(forward=record, after_forward=saved_now, after_backward=read_grads,
                      phase=lambda name: setattr(tracker, "phase", name))
    with tracker:
        loss = forward_backward(trainer, i, hooks)
        del loss
        optimizer_step(trainer.optimizer, hooks)
    trainer.steps_done = i + 1
    rec = recorders[0]
    states, bookkeeping = optimizer_bytes(trainer.optimizer)
    memory = StepMemory(unique_bytes(model.parameters()), grads[0], states, bookkeeping, rec.saved, rec.batch_bytes)
    peak = WholeStepPeak(tracker.peak, tracker.start, tracker.peak_phase,
                         {k: v for k, v in tracker.by_phase.items() if k != "before"}, str(trainer.device))
    return RecordedStep(memory, peak, tracker.rounded_peak, tracker.events, kinds, rec.blocks,
                        time.perf_counter() - t0, tracker.start)


def layer_label(where: str, blocks: str) -> str:
    """"layer 3" for a module inside the layers, else the module's name ("" outside any module)."""
    index, _ = layer_of(where, blocks) if where else (None, "")
    return f"layer {index}" if index is not None else where
