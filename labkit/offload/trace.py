"""The first iteration's saved-tensor trace, and the prefetch plan made from it.

Training repeats itself: every iteration saves the same tensors, of the same shapes, in
the same order, and backward uses them in the same (roughly reversed) order. vDNN (Rhu
et al., MICRO 2016) relies on it to offload layer by layer and prefetch one layer ahead;
SwapAdvisor (Huang et al., ASPLOS 2020) plans every swap from one profiled iteration.
Here the trace is read off a real step through ``saved_tensors_hooks``: for each storage
autograd saves, its order, size, producing module and lifetime on one clock that ticks
at every pack and every unpack (pack, first and last use in backward, release).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn as nn

from labkit.errors import LabkitError, require_positive
from labkit.offload.budget import SavedHooks
from labkit.rig.step import StepHooks, training_step
from labkit.rig.train import batch_tensors

Signature = tuple[str, tuple[int, ...], str, int]


@dataclass
class TraceEntry:
    """One saved storage of one iteration: who made it, how big, and when it lived."""

    index: int  # order of first save in forward
    module: str
    module_type: str
    shape: tuple[int, ...]  # shape of the first tensor saved on this storage
    dtype: str
    nbytes: int  # the whole storage, counted once
    packed: int  # clock at first save
    saves: int = 0  # how many saved tensors (views) share the storage
    uses: list[int] = field(default_factory=list)  # clocks of its unpacks in backward
    released: int | None = None  # clock when autograd let go of its last view

    @property
    def signature(self) -> Signature:
        return (self.module, self.shape, self.dtype, self.nbytes)

    @property
    def first_use(self) -> int | None:
        return self.uses[0] if self.uses else None

    @property
    def lifetime(self) -> int | None:
        """Clock ticks from save to release: how long the storage occupies the device."""
        return None if self.released is None else self.released - self.packed


@dataclass
class Trace:
    """Every saved storage of one step, in forward order, plus the backward use order."""

    entries: list[TraceEntry]
    use_order: list[int]  # entry index of each unpack, in backward order
    forward_end: int  # clock when forward ended

    @property
    def signature(self) -> list[Signature]:
        return [e.signature for e in self.entries]

    @property
    def total_bytes(self) -> int:
        return sum(e.nbytes for e in self.entries)

    def fetch_order(self) -> list[int]:
        """Entries by first use in backward: the order a prefetcher should read them."""
        return list(dict.fromkeys(self.use_order))

    def matches(self, other: Trace) -> bool:
        return self.signature == other.signature and self.use_order == other.use_order


class Tracer(SavedHooks):
    """Record a :class:`Trace` of the forward and backward run inside the context."""

    def __init__(self, model: nn.Module, exclude: tuple[torch.Tensor, ...] = ()) -> None:
        super().__init__(model, exclude)
        self.entries: list[TraceEntry] = []
        self.live: dict[int, TraceEntry] = {}
        self.use_order: list[int] = []
        self.forward_end = 0

    def _new(self, key: int, t: torch.Tensor, module: str, nbytes: int) -> None:
        e = TraceEntry(len(self.entries), module, self.types.get(module, ""), tuple(t.shape),
                       str(t.dtype).replace("torch.", ""), nbytes, self.clock)
        self.entries.append(e)
        self.live[key] = e

    def _hold(self, key: int, t: torch.Tensor):
        self.live[key].saves += 1
        held = super()._hold(key, t)
        held.meta = self.live[key]
        return held

    def _restore(self, held) -> torch.Tensor:
        held.meta.uses.append(self.clock)
        self.use_order.append(held.meta.index)
        return held.tensor

    def _released(self, key: int) -> None:
        e = self.live.pop(key, None)
        if e is not None:
            e.released = self.clock

    def trace(self) -> Trace:
        return Trace(self.entries, self.use_order, self.forward_end)


def trace_step(trainer, step: int | None = None) -> Trace:
    """Run one real training step of ``trainer`` (optimizer included, under its autocast) and trace it."""
    tracer = Tracer(trainer.model)

    def around(batch) -> Tracer:
        tracer.exclude(*batch_tensors(batch))
        return tracer

    def forward_ended(_: torch.Tensor) -> None:
        tracer.forward_end = tracer.clock

    training_step(trainer, step, StepHooks(around=around, after_forward=forward_ended))
    return tracer.trace()


def trace_iterations(trainer, steps: int = 3) -> list[Trace]:
    """Trace ``steps`` consecutive real steps; :func:`repeats` says whether they agree."""
    require_positive("steps", steps)
    return [trace_step(trainer) for _ in range(steps)]


def repeats(traces: list[Trace]) -> bool:
    """True when every later iteration saves and uses exactly what the first did."""
    return all(t.matches(traces[0]) for t in traces[1:])


@dataclass(frozen=True)
class Prefetch:
    """Read entry ``entry`` while backward is at use ``issue_at``; it is needed at use ``needed_at``."""

    entry: int
    module: str
    nbytes: int
    needed_at: int  # position in the backward use order
    issue_at: int

    @property
    def ahead(self) -> int:
        return self.needed_at - self.issue_at


def prefetch_plan(trace: Trace, lookahead: int = 2, selected: set[int] | None = None) -> list[Prefetch]:
    """For each first backward use of an offloaded entry, when to start reading it.

    Entries are fetched in first-use order, at most ``lookahead`` fetches in flight: the
    k-th fetch is issued when backward reaches the use of the (k - lookahead)-th one.
    vDNN's plan is lookahead 1 layer; here it counts tensors.
    """
    require_positive("lookahead", lookahead)
    firsts: dict[int, int] = {}
    for pos, idx in enumerate(trace.use_order):
        if (selected is None or idx in selected) and idx not in firsts:
            firsts[idx] = pos
    order = list(firsts.items())
    plan = []
    for k, (idx, pos) in enumerate(order):
        issue = 0 if k < lookahead else order[k - lookahead][1]
        e = trace.entries[idx]
        plan.append(Prefetch(idx, e.module, e.nbytes, pos, issue))
    if any(p.issue_at > p.needed_at for p in plan):
        raise LabkitError("prefetch plan issues a read after its use; the trace is inconsistent")
    return plan
