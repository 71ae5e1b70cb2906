"""The untrusted side of the 1F1B build-it: the rank that runs the learner's executor on a stage that watches itself.

The stage handed to the learner's ``run_1f1b`` is :class:`Watched`: every forward call is numbered and timed and
its input kept (the judge tells which micro-batch it was by matching it against its own reference activations);
each backward through the stage is stamped with the number of the forward whose graph it runs, so the record
says what the rank EXECUTED, in order, whatever list the learner's code believed it followed (a stash popped in
the wrong order shows as permuted micro-batches). Every tensor autograd saves inside the stage is counted while
alive (saved-tensor hooks, the parameters left out): the peak of live activations, in micro-batches, is measured.
Nothing here computes a reference: the record is plain data for :mod:`labkit.practice.build.onef1b_judge`.
"""

from __future__ import annotations

import itertools
import time
import weakref
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from labkit.practice.build.records import OpLog, load_module, recording

MAX_FORWARDS = 64  # inputs kept per rank: m forwards in an honest run (m <= 8 here)


class _Held:
    __slots__ = ("t", "__weakref__")

    def __init__(self, t: torch.Tensor) -> None:
        self.t = t


class _Mark(torch.autograd.Function):
    """Identity whose backward stamps (what, forward number, time): on a stage's output (its backward starts) and
    on its input (it ends)."""

    @staticmethod
    def forward(ctx, x, watched, what, k):  # noqa: ANN001, ANN205 - autograd's signature
        ctx.watched, ctx.what, ctx.k = watched, what, k
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):  # noqa: ANN001, ANN205
        ctx.watched.stamps.append((ctx.what, ctx.k, time.time(), next(ctx.watched.tick)))
        return grad, None, None, None


class Watched(nn.Module):
    """A stage that records itself: each forward's number, input and times; each backward's forward number and
    times; the live saved bytes (peak) and the bytes the first forward saved."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner
        self.live = self.peak = 0
        self.per_forward: list[int] = []
        self.forwards: list[tuple[float, float, int]] = []
        self.inputs: list[torch.Tensor] = []
        self.stamps: list[tuple[str, int, float, int]] = []
        self.tick = itertools.count()  # orders this rank's events (two may share a time.time())
        self._params = {p.untyped_storage().data_ptr() for p in inner.parameters()}

    def _free(self, n: int) -> None:
        self.live -= n

    def _pack(self, t: torch.Tensor) -> object:
        if t.untyped_storage().data_ptr() in self._params:
            return t
        held, n = _Held(t), t.nbytes
        self.live += n
        self.per_forward[-1] += n
        self.peak = max(self.peak, self.live)
        weakref.finalize(held, self._free, n)
        return held

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        start, k, seq = time.time(), len(self.forwards), next(self.tick)
        self.per_forward.append(0)
        if k < MAX_FORWARDS:
            self.inputs.append(x.detach().clone())
        h = _Mark.apply(x if x.requires_grad else x.detach().requires_grad_(), self, "B end", k)
        with torch.autograd.graph.saved_tensors_hooks(self._pack, lambda h: h.t if isinstance(h, _Held) else h):
            out = self.inner(h)
        self.forwards.append((start, time.time(), seq))
        return _Mark.apply(out, self, "B start", k)

    def events(self) -> list[list]:
        """[[phase, forward number, start, end], ...]: what ran on this rank (B: whose graph), in order."""
        ends = {k: t for w, k, t, _ in self.stamps if w == "B end"}
        rows = [(seq, ["F", k, s, e]) for k, (s, e, seq) in enumerate(self.forwards)]
        rows += [(seq, ["B", k, t, ends.get(k, t)]) for w, k, t, seq in self.stamps if w == "B start"]
        return [row for _, row in sorted(rows, key=lambda r: r[0])]


def model(p: int, width: int, seed: int) -> list[nn.Module]:
    """p stages of one tanh layer each (width x width): every side builds the same model from the seed."""
    torch.manual_seed(seed)
    return [nn.Sequential(nn.Linear(width, width), nn.Tanh()) for _ in range(p)]


def data(params: dict, m: int) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    g = torch.Generator().manual_seed(params["seed"] + 7)
    rows, width = params["rows"], params["width"]
    return list(torch.randn(m, rows, width, generator=g)), list(torch.randn(m, rows, width, generator=g))


def grads(stage: nn.Module) -> torch.Tensor:
    return torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in stage.parameters()])


def _schedules(mod: Any, asked: list) -> list:
    out: list = []
    for p, m in asked:
        try:
            out.append([[[str(a[0]), int(a[1])] for a in mod.schedule_1f1b(r, p, m)] for r in range(p)])
        except NotImplementedError:
            raise
        except Exception as err:  # noqa: BLE001 - the learner's code may raise anything
            out.append(f"raised {type(err).__name__}: {err}"[:300])
    return out


def onef1b_rank(rank: int, world_size: int, log: OpLog, path: str, params: dict, m: int) -> dict[str, Any]:
    """(Runs in a rank, UNTRUSTED.) The learner's executor on this rank's watched stage; what it executed."""
    with recording(log):
        mod = load_module(path)
    asked = _schedules(mod, params["ask"]) if rank == 0 and params.get("ask") else None
    stage = model(world_size, params["width"], params["seed"])[rank]
    (xs, ys), last = data(params, m), rank == world_size - 1
    watched = Watched(stage)
    dist.barrier()  # every rank starts its step together: the bubble is measured from here
    start = time.time()
    with recording(log):
        losses = mod.run_1f1b(watched, rank, world_size, m, xs if rank == 0 else None, ys if last else None,
                              nn.MSELoss(), (params["rows"], params["width"]))
    end = time.time()
    out = {"losses": [float(v) for v in losses or []], "grads": grads(stage).clone(), "events": watched.events(),
           "inputs": watched.inputs, "peak_bytes": int(watched.peak), "start": start, "end": end,
           "first_forward_bytes": int(watched.per_forward[0]) if watched.per_forward else 0}
    return out | ({"schedules": asked} if asked is not None else {})
