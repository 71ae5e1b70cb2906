"""vDNN's own software cost, measured: the offloader with copies that move no bytes.

``calibrate`` replays the real vDNN micro-run in the simulator with this machine's copy
bandwidth, per-copy and per-file costs, and per-layer compute; what the replay has no term
for is the offloader's own work: the saved-tensor hooks (``torch.autograd.graph.
saved_tensors_hooks``, called for every tensor autograd saves), its bookkeeping (a slot per
storage, the budget counter), and the hand-off to and from the prefetch thread (a condition
variable, a thread started per step) that on a small machine also competes with compute for
the cores. :class:`NullOffloader` is vDNN's :class:`~labkit.offload.vdnn.Offloader` with
its two copies replaced by keeping a reference: the same hooks, slots, counter and thread,
no bytes moved. Its step time minus the plain step's is that software cost, measured
(:func:`software_cost`); ``calibrate`` adds it to the replay as a calibrated term.
Wall-clock figures: shown, never asserted.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import torch

from labkit.errors import require_positive
from labkit.offload.trace import Trace
from labkit.offload.vdnn import Offloader
from labkit.offload.vdnn.slots import Slot
from labkit.rig.train import Trainer


class NullOffloader(Offloader):
    """An :class:`Offloader` whose "copy" out keeps a reference and whose copy back returns it: no bytes move."""

    def _write(self, slot: Slot, u8: torch.Tensor) -> None:
        slot.buf = u8
        self.stats.bytes_written += slot.nbytes

    def _read(self, slot: Slot) -> torch.Tensor:
        assert slot.buf is not None
        return slot.buf


@dataclass(frozen=True)
class SoftwareCost:
    """Median seconds the offloader adds with no bytes moved, forward and backward, and over how many tensors."""

    forward_s: float
    backward_s: float
    tensors: int

    @property
    def total_s(self) -> float:
        return self.forward_s + self.backward_s

    @property
    def per_tensor_s(self) -> float:
        return self.total_s / self.tensors if self.tensors else 0.0


def timed_step(trainer: Trainer, i: int, off: Offloader | None) -> tuple[float, float]:
    """(forward, backward) seconds of batch ``i``, through ``off`` if given (it must be entered); grads cleared."""
    x, y = trainer.data(i)
    trainer.model.train()
    if off is not None:
        off.begin_step(x, y)
    try:
        t0 = time.perf_counter()
        _, loss = trainer.model(x, y)
        t1 = time.perf_counter()
        if off is not None:
            off.begin_backward()
        loss.backward()
        if off is not None:
            off.end_step()
        t2 = time.perf_counter()
    finally:
        trainer.model.zero_grad(set_to_none=True)
    return t1 - t0, t2 - t1


def software_cost(trainer: Trainer, trace: Trace, repeats: int = 5) -> SoftwareCost:
    """Null-offloaded step minus plain step, forward and backward apart: the median of ``repeats`` paired differences.

    Every storage of the trace is "offloaded", as in ``calibrate``'s vDNN run. Plain and null-offloaded
    steps alternate (the offloader is entered for its step only: its hooks are active while it is), on steps
    0 .. ``repeats`` with the same weights (no optimizer step); the first pair warms up and is dropped. Each
    difference is taken within a pair, so a slow spell of the machine affects both of its terms.
    """
    require_positive("repeats", repeats)
    plain, null, tensors = [], [], 0
    for i in range(repeats + 1):
        p = timed_step(trainer, i, None)
        with NullOffloader(trainer.model, "dram", trace=trace) as off:
            n = timed_step(trainer, i, off)
            tensors = off.stats.tensors_offloaded
        if i:
            plain.append(p)
            null.append(n)
    fwd = statistics.median(n[0] - p[0] for n, p in zip(null, plain, strict=True))
    bwd = statistics.median(n[1] - p[1] for n, p in zip(null, plain, strict=True))
    return SoftwareCost(max(0.0, fwd), max(0.0, bwd), tensors)
