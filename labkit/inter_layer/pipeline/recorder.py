"""What one rank's stages did: each compute action timed, the bytes of live saved tensors counted."""

from __future__ import annotations

import time
from functools import partial
from typing import Any

import torch
import torch.distributed as dist


def _storage(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr()


class _Held:
    """A saved tensor as autograd keeps it; telling the recorder when autograd lets go of it."""

    __slots__ = ("tensor", "release")

    def __init__(self, tensor: torch.Tensor, release: Any) -> None:
        self.tensor, self.release = tensor, release

    def __del__(self) -> None:
        self.release()


def _unpack(packed: Any) -> torch.Tensor:
    return packed.tensor if isinstance(packed, _Held) else packed


class Recorder:
    """Times the compute actions of one rank and counts the bytes of live saved tensors."""

    def __init__(self, skip: list[torch.Tensor], device: torch.device) -> None:
        self.skip, self.device = {_storage(t) for t in skip}, device
        self.sync = torch.cuda.synchronize if device.type == "cuda" else lambda: None  # GPU work is queued
        self.held: dict[int, list[int]] = {}  # storage -> [packed handles alive, bytes]
        self.live = self.peak = 0
        self.t0, self.step, self.current = 0.0, 0, (0, 0)
        self.added: dict[tuple[int, int], int] = {}  # (stage, microbatch) -> bytes it first saved
        self.events: list[list] = []  # [step, stage, phase, microbatch, start, end]
        self.batch: set[int] = set()
        self.after_forward = False

    def begin_step(self, step: int, batch: tuple[torch.Tensor, ...]) -> None:
        dist.barrier()
        t0 = torch.tensor([time.perf_counter()], dtype=torch.float64, device=self.device)
        dist.broadcast(t0, src=0)
        self.t0, self.step, self.peak, self.added = float(t0), step, self.live, {}
        self.batch = {_storage(t) for t in batch}

    def _pack(self, t: torch.Tensor) -> Any:
        key = _storage(t)
        if key in self.skip or key in self.batch or not t.numel():
            return t
        entry = self.held.get(key)
        if entry is None:
            entry = self.held[key] = [0, t.untyped_storage().nbytes()]
            self.live += entry[1]
            self.peak = max(self.peak, self.live)
            self.added[self.current] = self.added.get(self.current, 0) + entry[1]
        entry[0] += 1
        return _Held(t, partial(self._release, key))

    def _release(self, key: int) -> None:
        entry = self.held[key]
        entry[0] -= 1
        if entry[0] == 0:
            del self.held[key]
            self.live -= entry[1]

    def _timed(self, fn: Any, stage: int, phase: str, mb: int, *args: Any, **kwargs: Any) -> Any:
        self.sync()
        start, self.current = time.perf_counter(), (stage, mb)
        with torch.autograd.graph.saved_tensors_hooks(self._pack, _unpack):
            out = fn(mb, *args, **kwargs)  # backward saves nothing (no double backward)
        self.sync()
        self.events.append([self.step, stage, phase, mb, start - self.t0, time.perf_counter() - self.t0])
        self.after_forward = phase == "F"
        return out

    def timed_loss(self, fn: Any, *args: Any, **kwargs: Any) -> torch.Tensor:
        """The loss of the last stage; called by torch's shape inference too, which is not timed or counted."""
        if not self.after_forward:
            return fn(*args, **kwargs)
        with torch.autograd.graph.saved_tensors_hooks(self._pack, _unpack):
            loss = fn(*args, **kwargs)
        self.sync()
        self.events[-1][5] = time.perf_counter() - self.t0  # the loss belongs to the last stage's forward
        self.after_forward = False
        return loss

    def instrument(self, stages: list) -> None:
        """Wrap the stages' compute methods on the instances: the schedule calls these, and only for its actions."""
        for st in stages:
            st.forward_one_chunk = partial(self._timed, st.forward_one_chunk, st.stage_index, "F")
            st.backward_one_chunk = partial(self._timed, st.backward_one_chunk, st.stage_index, "B")
