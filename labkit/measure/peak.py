"""The most a real training step holds at once: by phase (torch's ``MemTracker``) and over the whole step.

``phase_memory`` and ``peak_step_bytes`` read MemTracker's snapshots of the forward and
backward passes: what activations and temporaries cost. They miss the optimizer step, where
the fp32 gradient copies and (in bf16-mixed) the fp32 master weights are alive beside
everything else. ``whole_step_peak`` follows every storage of the step, optimizer step
included, with its own tracker (a ``TorchDispatchMode`` that adds each storage an operation
creates and subtracts it when Python frees it) on the CPU, and with the caching allocator's
statistics (``torch.cuda.max_memory_allocated``, ``max_memory_reserved``) on CUDA.
``memtracker_peak`` is MemTracker's own whole-step peak, the independent check.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch._subclasses.fake_tensor import is_fake
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from labkit.measure.saved import _storage_key

if TYPE_CHECKING:
    from labkit.rig.train import Trainer


def _model_state_tensors(trainer) -> list[torch.Tensor]:
    """Everything a step starts with: parameters, their gradients, buffers, optimizer states, master weights."""
    model, opt = trainer.model, trainer.optimizer
    out = [*model.parameters(), *model.buffers()]
    out += [p.grad for p in model.parameters() if p.grad is not None]
    out += list(getattr(opt, "master", []))
    out += [t for s in opt.state.values() for t in s.values() if torch.is_tensor(t)]
    return out


PHASES = ("before forward", "after forward", "peak backward", "after backward")
CATEGORIES = ("parameters", "gradients", "optimizer", "activations", "temporaries", "other")


def phase_memory(trainer: Trainer, step: int | None = None) -> dict[str, dict[str, int]]:
    """Memory by category at each phase of one real step, from torch's ``MemTracker``.

    Run it after at least one step, so the optimizer states already exist. MemTracker
    files every tensor alive before the step that is not model state (the corpus, the
    batch) as an activation; those are moved to ``other`` here. Use it on fp32 runs:
    it does not know that the master weights of ``MasterWeightAdamW`` are optimizer state.
    """
    from torch.distributed._tools.mem_tracker import MemTracker, _MemRefType, _ModState

    i = trainer.steps_done if step is None else step
    inner = getattr(trainer.optimizer, "inner", trainer.optimizer)
    mt = MemTracker()
    mt.track_external(trainer.model, inner)
    with mt:
        trainer.step(i)
    snaps = mt.memory_tracking[trainer.model].snapshots
    kinds = {
        "parameters": _MemRefType.PARAM, "gradients": _MemRefType.GRAD, "optimizer": _MemRefType.OPT,
        "activations": _MemRefType.ACT, "temporaries": _MemRefType.TEMP,
    }
    states = dict(zip(PHASES, (_ModState.PRE_FW, _ModState.POST_FW, _ModState.PEAK_BW, _ModState.POST_BW), strict=True))
    out: dict[str, dict[str, int]] = {}
    baseline = None  # tensors alive before the step (the corpus, say) are "other", not activations
    for phase, state in states.items():
        snap = next(iter(snaps[state][-1].values()))
        row = {c: int(snap[k]) for c, k in kinds.items()}
        baseline = row["activations"] if baseline is None else baseline
        row["activations"] -= baseline
        row["other"] = int(snap["Total"]) - sum(row.values())
        out[phase] = row
    return out


def peak_step_bytes(trainer: Trainer, step: int | None = None) -> int:
    """The most a real step holds at once (MemTracker), leaving out data kept outside the step.

    Model states, saved activations and the temporaries of backward at their common
    peak, as MemTracker's forward/backward snapshots see them. It misses the optimizer
    step (fp32 gradient copies, master weights): ``whole_step_peak`` is the most a whole
    step holds. Run it after one step so the optimizer states exist.
    """
    phases = phase_memory(trainer, step)
    return max(sum(v for k, v in row.items() if k != "other") for row in phases.values())


class LiveBytes(TorchDispatchMode):
    """Bytes of the storages alive, and their peak, on one device: each op's outputs added, frees subtracted.

    Storages alive at entry are given with ``start``; a storage counts once however many tensors view it.
    ``ignore``: storages a step only reads from and that no device would hold (the lab's corpus, which
    each batch slices: MemTracker counts it once the first slice is taken).
    """

    def __init__(self, start: list[torch.Tensor], device: torch.device, ignore: tuple[torch.Tensor, ...] = ()) -> None:
        super().__init__()
        self.device, self.current, self.peak, self._phase, self.peak_phase = device, 0, 0, "before", "before"
        self._refs: dict[int, weakref.ref] = {}
        self._ignore = {_storage_key(t) for t in ignore}
        self.by_phase: dict[str, int] = {}
        for t in start:
            self._add(t)
        self.start = self.peak = self.current

    @property
    def phase(self) -> str:
        return self._phase

    @phase.setter
    def phase(self, name: str) -> None:
        """A phase that allocates nothing (a fused optimizer step) still has a peak: what it began with."""
        self._phase = name
        self.by_phase[name] = max(self.by_phase.get(name, 0), self.current)

    def _freed(self, key: int, nbytes: int, ref) -> None:
        if self._refs.get(key) is ref:
            del self._refs[key]
            self.current -= nbytes

    def _add(self, t) -> None:
        if not torch.is_tensor(t) or t.device != self.device or t.is_meta:
            return
        st = t.untyped_storage()
        # a fake storage has no address (and asking warns): under fake_step.fake_keys the key is its identity
        key = _storage_key(t) if is_fake(t) or st.data_ptr() else id(st)
        if key in self._ignore:
            return
        if key in self._refs and self._refs[key]() is st:
            return
        nbytes = st.nbytes()
        ref = weakref.ref(st, lambda r, k=key, n=nbytes: self._freed(k, n, r))
        self._refs[key] = ref
        self.current += nbytes
        if self.current > self.peak:
            self.peak, self.peak_phase = self.current, self.phase
        self.by_phase[self.phase] = max(self.by_phase.get(self.phase, 0), self.current)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_leaves(out):
            self._add(t)
        return out


@dataclass(frozen=True)
class WholeStepPeak:
    """The most one training step held at once, on its device (bytes)."""

    peak: int  # everything alive at the peak: model states, master weights, activations, temporaries, the batch
    before: int  # alive when the step began (parameters, optimizer states...)
    phase: str  # where the peak fell: "forward", "backward" or "optimizer"
    by_phase: dict  # the peak of each phase
    device: str
    reserved: int | None = None  # CUDA only: the most the caching allocator held from the device

    @property
    def allocator_reserve(self) -> int | None:
        """Bytes the caching allocator kept beyond the allocated peak (None on the CPU)."""
        return None if self.reserved is None else self.reserved - self.peak


def whole_step_peak(trainer, step: int | None = None) -> WholeStepPeak:
    """Run one real step (forward, backward, optimizer step) and return the most it held at once.

    Run it after one step, so the optimizer states exist (its first step creates them). On CUDA the
    peaks come from ``torch.cuda``'s statistics, reset at each phase; on the CPU from ``LiveBytes``,
    which leaves out the tiny GPT's corpus (``trainer.data.tokens``) that the batches are sliced from.
    """
    i = trainer.steps_done if step is None else step
    device = trainer.device
    trainer.model.train()
    if device.type == "cuda":
        return _cuda_step_peak(trainer, i, device)
    corpus = getattr(trainer.data, "tokens", None)
    tracker = LiveBytes(_model_state_tensors(trainer), device, () if corpus is None else (corpus,))
    with tracker:
        _phased_step(trainer, i, tracker)
    return WholeStepPeak(tracker.peak, tracker.start, tracker.peak_phase,
                         {k: v for k, v in tracker.by_phase.items() if k != "before"}, str(device))


def _phased_step(trainer, i: int, tracker) -> None:
    """``trainer.step(i)``, naming each phase for ``tracker`` (a LiveBytes or a CUDA recorder)."""
    from labkit.rig.step import StepHooks, training_step

    training_step(trainer, i, StepHooks(phase=lambda name: setattr(tracker, "phase", name)))


class _CudaPhases:
    """Per-phase peaks from torch.cuda's statistics: reset when a phase begins, read when it ends."""

    def __init__(self, device: torch.device) -> None:
        self.device, self._phase, self.by_phase, self.reserved = device, None, {}, 0

    def _close(self) -> None:
        if self._phase is not None:
            torch.cuda.synchronize(self.device)
            self.by_phase[self._phase] = torch.cuda.max_memory_allocated(self.device)
            self.reserved = max(self.reserved, torch.cuda.max_memory_reserved(self.device))

    @property
    def phase(self) -> str | None:
        return self._phase

    @phase.setter
    def phase(self, name: str) -> None:
        self._close()
        torch.cuda.reset_peak_memory_stats(self.device)
        self._phase = name


def _cuda_step_peak(trainer, i: int, device: torch.device) -> WholeStepPeak:
    torch.cuda.synchronize(device)
    before = torch.cuda.memory_allocated(device)
    rec = _CudaPhases(device)
    _phased_step(trainer, i, rec)
    rec._close()
    phase = max(rec.by_phase, key=rec.by_phase.get)
    return WholeStepPeak(rec.by_phase[phase], before, phase, dict(rec.by_phase), str(device), rec.reserved)


def memtracker_peak(trainer, step: int | None = None) -> int:
    """torch's ``MemTracker`` peak over one whole step (bytes): the check on ``whole_step_peak``."""
    from torch.distributed._tools.mem_tracker import MemTracker

    i = trainer.steps_done if step is None else step
    inner = getattr(trainer.optimizer, "inner", trainer.optimizer)
    mt = MemTracker()
    mt.track_external(trainer.model, inner, *getattr(trainer.optimizer, "master", []))
    with mt:
        trainer.step(i)
    return int(mt.get_tracker_snapshot("peak")[trainer.device]["Total"])
