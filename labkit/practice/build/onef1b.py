"""Build it yourself, notebook 02: a 1F1B pipeline executor over send/recv (Narayanan et al., "PipeDream",
SOSP 2019; the schedule as Megatron-LM runs it, SC 2021), graded on 2 and 4 real ranks.

The learner's ``run_1f1b`` drives one stage of a small tanh MLP per rank. The stage it receives is watched:
every tensor autograd saves inside it is counted while alive (saved-tensor hooks; the parameters left out), so
the peak of live activations on each rank is measured in micro-batches, and each forward and backward is timed.
Checked: the order is 1F1B's (:func:`labkit.sim.schedule`); the losses and the accumulated gradients equal one
process running the whole model over the same micro-batches (the same sums in the same order: equal within
``TOL``, in practice to the bit); rank 0 holds at most p micro-batches of activations; the measured bubble is
shown beside the schedule's (p-1)/(m+p-1), never graded (the ranks share the machine's cores).

The typical bugs fail a case named after them: a deadlocked send order (both ranks block in a send: the run is
stopped at the run's timeout and labkit.dist says where each rank waited), GPipe's order (all forwards first:
more than p micro-batches alive), and gradients not accumulated over the micro-batches.
"""

from __future__ import annotations

import re
import time
import weakref
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from labkit.practice.build.harness import BuildExercise, launch, load_module, register_build
from labkit.practice.coding import Case
from labkit.sim import bubble_fraction, schedule

KEY = "02.build.onef1b"
RUNS = ((2, 4, 40.0), (4, 6, 90.0))  # (p, m, timeout s): 2 ranks, then 4 (m > p, so GPipe's order shows)
WIDTH, ROWS, TOL = 16, 4, 1e-6


class _Held:
    __slots__ = ("t", "__weakref__")

    def __init__(self, t: torch.Tensor) -> None:
        self.t = t


class _Mark(torch.autograd.Function):
    """Identity whose backward stamps the time: put on a stage's output (backward starts) and input (it ends)."""

    @staticmethod
    def forward(ctx, x, stamps, what):  # noqa: ANN001, ANN205 - autograd's signature
        ctx.stamps, ctx.what = stamps, what
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):  # noqa: ANN001, ANN205
        ctx.stamps.append((ctx.what, time.time()))
        return grad, None, None


class Watched(nn.Module):
    """A stage that measures itself: live saved bytes (peak), bytes per micro-batch, and F/B start and end."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner
        self.live = self.peak = 0
        self.per_forward: list[int] = []
        self.events: list[tuple[str, float, float]] = []  # (phase, start, end)
        self.stamps: list[tuple[str, float]] = []
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
        start = time.time()
        self.per_forward.append(0)
        h = _Mark.apply(x if x.requires_grad else x.detach().requires_grad_(), self.stamps, "B end")
        with torch.autograd.graph.saved_tensors_hooks(self._pack, lambda h: h.t if isinstance(h, _Held) else h):
            out = self.inner(h)
        self.events.append(("F", start, time.time()))
        return _Mark.apply(out, self.stamps, "B start")


def model(p: int, seed: int = 0) -> list[nn.Module]:
    """Four tanh layers of width 16 (1,088 parameters), cut into p stages."""
    torch.manual_seed(seed)
    layers = [nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.Tanh()) for _ in range(4)]
    per = len(layers) // p
    return [nn.Sequential(*layers[s * per: (s + 1) * per]) for s in range(p)]


def _data(m: int) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    g = torch.Generator().manual_seed(7)
    return list(torch.randn(m, ROWS, WIDTH, generator=g)), list(torch.randn(m, ROWS, WIDTH, generator=g))


def _grads(stage: nn.Module) -> torch.Tensor:
    return torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in stage.parameters()])


def onef1b_rank(rank: int, world_size: int, path: str, m: int = 4) -> dict[str, Any]:
    """(Runs in a rank.) The learner's executor on this rank's stage, and one process running the whole model."""
    mod = load_module(path)
    stages, (xs, ys) = model(world_size), _data(m)
    loss_fn, last = nn.MSELoss(), rank == world_size - 1
    whole = nn.Sequential(*[nn.Sequential(*s) for s in model(world_size)])
    ref_losses = []
    for x, y in zip(xs, ys, strict=True):
        loss = loss_fn(whole(x), y)
        ref_losses.append(float(loss.detach()))
        (loss / m).backward()
    watched = Watched(stages[rank])
    dist.barrier()  # every rank starts its step together: the bubble is measured from here
    start = time.time()
    losses = mod.run_1f1b(watched, rank, world_size, m, xs if rank == 0 else None, ys if last else None, loss_fn,
                          (ROWS, WIDTH))
    end = time.time()
    mine, want = _grads(stages[rank]), _grads(whole[rank])
    one = nn.Sequential(*model(world_size)[rank])  # the last micro-batch's gradient alone, for the diagnosis
    ends = [t for w, t in watched.stamps if w == "B end"]
    starts = [t for w, t in watched.stamps if w == "B start"]
    return {"losses": [float(v) for v in losses or []], "ref_losses": ref_losses if last else [],
            "grad_diff": float((mine - want).abs().max()), "grad_ratio": float(mine.norm() / want.norm()),
            "peak_microbatches": watched.peak / max(1, watched.per_forward[0]) if watched.per_forward else 0.0,
            "forwards": len(watched.events), "backwards": len(ends), "start": start, "end": end,
            "busy": sum(e - s for _, s, e in watched.events) + sum(e - s for s, e in zip(starts, ends, strict=False)),
            "last_only": _last_only_diff(one, mine, xs, ys, rank, world_size, loss_fn, m)}


def _last_only_diff(one: nn.Module, mine: torch.Tensor, xs: list, ys: list, rank: int, p: int,
                    loss_fn: nn.Module, m: int) -> float:
    """How far the learner's gradient is from the LAST micro-batch's alone (0: nothing was accumulated)."""
    whole = nn.Sequential(*model(p))
    (loss_fn(whole(xs[-1]), ys[-1]) / m).backward()
    return float((mine - _grads(whole[rank])).abs().max())


def order_cases(mod: Any) -> list[Case]:
    """``schedule_1f1b`` alone, no ranks: the order labkit.sim.schedule('1f1b', p, m) gives every rank."""
    cases = []
    for p, m in ((2, 4), (4, 6), (3, 3)):
        want = {r: [(a.phase, a.microbatch) for a in acts] for r, acts in schedule("1f1b", p, m).items()}
        got = {r: [tuple(a) for a in mod.schedule_1f1b(r, p, m)] for r in range(p)}
        bad = next((r for r in range(p) if got[r] != want[r]), None)
        gpipe = bad is not None and all(ph == "F" for ph, _ in got[bad][:m])
        cases.append(Case(f"schedule_1f1b order for p={p}, m={m}", bad is None, "" if bad is None else
                          ("GPipe order (all forwards first) " if gpipe else "") +
                          f"rank {bad}: expected {want[bad]}, got {got[bad]}",
                          ("How many forwards does rank r run before its first backward?",
                           "p - r forwards, then one backward and one forward each, then the remaining backwards.")))
    return cases


def _deadlock(failed: Case, timeout: float) -> Case:
    """A run that timed out with every rank inside send/recv is a deadlock: say so, by name."""
    waits = re.findall(r"rank (\d+) in (send|recv|isend|irecv)", failed.detail)
    if not waits:
        return failed
    where = ", ".join(f"rank {r} in {w}" for r, w in waits)
    return Case(failed.name, False, f"deadlock: {where}; each rank waits for a peer that waits too (a blocking "
                f"send posted before the matching receive): stopped after {timeout:g} s",
                ("Where is rank 0 when rank 1 sends its first gradient back, and where is rank 1 then?",
                 "Send without blocking (dist.isend, wait on the works at the end); receive when the value is needed."))


def grade(results: list[dict[str, Any]], p: int, m: int) -> list[Case]:
    """Cases of one run from every rank's report (see :func:`onef1b_rank`)."""
    last, r0 = results[-1], results[0]
    ok = len(last["losses"]) == m and max(abs(a - b) for a, b in zip(last["losses"], last["ref_losses"],
                                                                        strict=False)) <= TOL  # fmt: skip
    cases = [Case(f"p={p}: the {m} losses equal one process's", ok, "" if ok else
                  f"expected {last['ref_losses']}, got {last['losses']}")]
    diff = max(r["grad_diff"] for r in results)
    lone = max(r["last_only"] for r in results)
    ratio = results[0]["grad_ratio"]
    why = ("gradients not accumulated over micro-batches: only the last micro-batch's gradient is left" if lone <= TOL
           else f"the gradients are {ratio:.3g} x the whole batch's: the loss is not divided by m" if
           abs(ratio - m) < 1e-3 else f"largest difference {diff:.3g}")
    cases.append(Case(f"p={p}: the gradients equal one process's (within {TOL:g})", diff <= TOL,
                      "" if diff <= TOL else why,
                      ("What happens to a parameter's .grad when a second micro-batch runs backward?",
                       "Never zero the gradients inside the step: autograd adds each micro-batch's into .grad.")))
    peak = r0["peak_microbatches"]
    cases.append(Case(f"p={p}: rank 0 holds at most p = {p} micro-batches of activations (measured)", peak <= p,
                      "" if peak <= p else f"GPipe order (all forwards first): {peak:g} micro-batches alive at once, "
                      f"1F1B keeps {p}", ("When does rank 0 run its first backward?",
                                          "After p forwards; then one backward, one forward, ...")))
    span = max(r["end"] for r in results) - min(r["start"] for r in results)
    bubble = 1 - sum(r["busy"] for r in results) / (p * span) if span > 0 else 0.0
    cases.append(Case(f"p={p}: measured bubble {bubble:.2f} beside the schedule's {bubble_fraction(p, m):.2f} "
                      "(shown, not graded)", True))
    return cases


def run(path: Path) -> list[Case]:
    """Grade the module at ``path``: the order alone, then the executor on 2 and on 4 real ranks."""
    cases = order_cases(load_module(path))
    for p, m, timeout in RUNS:
        results, failed = launch(onef1b_rank, p, path, timeout=timeout, what="runs your 1F1B step", m=m)
        if failed:
            return [*cases, _deadlock(failed, timeout)]
        cases += grade(results, p, m)
    return cases


register_build(BuildExercise(
    key=KEY, stub="onef1b.py",
    task="Write schedule_1f1b(rank, world_size, m) -> [('F', i) | ('B', i), ...] and run_1f1b(stage, rank, "
         "world_size, m, inputs, targets, loss_fn, shape) -> losses: one 1F1B step over send/recv.",
    run=run,
    hint=("What does stage r need before its forward of micro-batch i, and before its backward?",
          "Forward: receive the activation from r-1 (rank 0 takes inputs[i]); backward: receive the gradient "
          "from r+1 (the last rank starts from loss / m); send the other way with dist.isend."),
    worked="Order: p - r forwards, then alternate one backward and one forward, then the remaining backwards. "
           "F i: x = inputs[i] on rank 0, else recv a tensor of `shape` from r-1 and set requires_grad; out = "
           "stage(x); the last rank computes loss = loss_fn(out, targets[i]), keeps loss / m; the others isend "
           "out.detach() to r+1; stash (x, out) under i. B i: pop (x, out); the last rank calls out.backward(), "
           "the others recv the gradient from r+1 and call out.backward(grad); every rank but 0 isends x.grad to "
           "r-1. Wait on every isend's work at the end; never zero .grad inside the step.",
))
