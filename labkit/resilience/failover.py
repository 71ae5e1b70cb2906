"""Bamboo's failover, for real: 2 gloo ranks each keep their neighbour's stage; one is SIGKILLed, the other carries on.

Thorpe et al., "Bamboo: Making Preemptible Instances Resilient for Affordable Training of Large
DNNs", NSDI 2023: with redundant computation (RC) each pipeline stage also holds its successor's
layers (a ring) and keeps them up to date by computing them, not by receiving them; when a stage
is lost its predecessor takes over without a restart or a checkpoint read. Here the pipeline is
the tiny GPT cut in two: each rank runs its own stage and its peer's (forward and backward, with
the peer's AdamW). One rank is SIGKILLed mid-step; the survivor drops the step in flight and
finishes the run alone from its replica, bit-identical to a run never killed, no disk read.

Why a module of its own: ``redundancy`` simulates RC (step time, held activations, goodput) on
``labkit.sim``; this file runs real processes through ``labkit.dist.run_outcomes``, which lets
the group go on when a rank dies (``labkit.dist.run`` stops it). Written by hand: no library
runs a pipeline with redundant stages.
"""

from __future__ import annotations

import copy
import datetime
import os
import signal
import time
from dataclasses import dataclass
from functools import partial
from typing import Any

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.optim import AdamW

from labkit import dist as ldist
from labkit.errors import LabkitError, require_choice, require_divides, require_positive
from labkit.rig.data import batches, vocab_size
from labkit.rig.model import GPTConfig, TinyGPT, config_from
from labkit.rig.step import optimizer_step

FAIL_MODEL: dict[str, Any] = {"seq_len": 16, "n_layer": 2, "n_head": 2, "d_model": 32, "dropout": 0.0}
LR = 3e-3


class _Stage(nn.Module):
    """Half of the GPT's blocks: with the embedding (stage 0) or with ln_f and the head (stage 1)."""

    def __init__(self, gpt: TinyGPT, blocks: range, first: bool) -> None:
        super().__init__()
        self.first = first
        self.ends = nn.ModuleList([gpt.wte, gpt.wpe] if first else [gpt.ln_f, gpt.lm_head])
        self.h = nn.ModuleList(gpt.h[i] for i in blocks)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.first:  # token ids (b, s) -> (b, s, h)
            x = self.ends[0](x) + self.ends[1](torch.arange(x.size(1)))
        for block in self.h:
            x = block(x)
        return x if self.first else self.ends[1](self.ends[0](x))  # (b, s, vocab) on stage 1


def _stages(model: dict[str, Any] | None, seed: int, lr: float) -> tuple[GPTConfig, list[_Stage], list[AdamW]]:
    """The seeded GPT cut in two, head untied (the two ends live on different ranks), an AdamW per stage."""
    cfg = config_from({"vocab_size": vocab_size(), **FAIL_MODEL}, model, no_dropout="the survivor must match "
                      "one process bit for bit")
    if cfg.n_layer % 2:
        raise LabkitError(f"model n_layer must be even: two stages of equal depth (got {cfg.n_layer})")
    torch.manual_seed(seed)
    gpt = TinyGPT(cfg)
    gpt.lm_head.weight = nn.Parameter(gpt.wte.weight.detach().clone())
    half = cfg.n_layer // 2
    stages = [copy.deepcopy(_Stage(gpt, range(0, half), True)),
              copy.deepcopy(_Stage(gpt, range(half, cfg.n_layer), False))]
    return cfg, stages, [AdamW(s.parameters(), lr=lr, weight_decay=0.0, foreach=False) for s in stages]


def _loss(logits: torch.Tensor, y: torch.Tensor, m: int) -> torch.Tensor:
    return F.cross_entropy(logits.view(-1, logits.size(-1)), y.reshape(-1)) / m


def _local_step(s0: _Stage, s1: _Stage, x: torch.Tensor, y: torch.Tensor, m: int) -> float:
    """Both stages in one process, same micro-batches and order: the reference, and the survivor after failover."""
    outs = []
    for xi in x.chunk(m):
        a = s0(xi)
        h = a.detach().requires_grad_()
        outs.append((a, h, s1(h)))
    total = 0.0
    for (a, h, z), yi in zip(outs, y.chunk(m), strict=True):
        loss = _loss(z, yi, m)
        loss.backward()
        a.backward(h.grad)
        total += loss.item()
    return total


def _wait(work: Any, timeout: float) -> None:
    work.wait(timeout=datetime.timedelta(seconds=timeout))  # a dead peer raises at once; a hung one after timeout


def _pipeline_step(rank: int, own: _Stage, rep: _Stage, x: torch.Tensor, y: torch.Tensor, m: int, die: bool,
                   timeout: float) -> tuple[float, bool]:
    """One GPipe step over 2 ranks with RC; returns (loss, did the redundant result equal the received one).

    Rank 0 sends activations and runs stage 1's forward and backward on its own activations; rank 1
    receives them and runs stage 0 again from the tokens, and its backward with its own input gradient.
    ``die``: SIGKILL this process right after its first send of the step.
    """
    outs, same, total = [], True, 0.0
    for xi in x.chunk(m):
        if rank == 0:
            a = own(xi)
            _wait(dist.isend(a.detach(), 1), timeout)
            if die:
                os.kill(os.getpid(), signal.SIGKILL)
            h = a.detach().requires_grad_()
            outs.append((a, h, rep(h)))  # redundant forward of stage 1
        else:
            a = rep(xi)  # redundant forward of stage 0
            h = torch.empty_like(a)
            _wait(dist.irecv(h, 0), timeout)
            same &= torch.equal(h, a.detach())
            outs.append((a, h.requires_grad_(), own(h)))
    for (a, h, z), yi in zip(outs, y.chunk(m), strict=True):
        loss = _loss(z, yi, m)
        loss.backward()  # stage 1's backward: the real one on rank 1, the redundant one on rank 0
        total += loss.item()
        if rank == 0:
            g = torch.empty_like(h)
            _wait(dist.irecv(g, 1), timeout)
            same &= torch.equal(g, h.grad)
            a.backward(g)
        else:
            _wait(dist.isend(h.grad, 0), timeout)
            if die:
                os.kill(os.getpid(), signal.SIGKILL)
            a.backward(h.grad)  # redundant backward of stage 0
    return total, same


def _state_bytes(stage: _Stage, opt: AdamW) -> int:
    """Weights and AdamW moments between steps (the 0-dim step counters left out)."""
    ts = list(stage.parameters()) + [t for s in opt.state.values() for t in s.values() if t.dim()]
    return sum(t.numel() * t.element_size() for t in ts)


def _updates(opt: AdamW) -> int:
    """Completed optimizer steps, as AdamW counts them (0 before the first)."""
    return int(next(iter(opt.state.values()))["step"]) if opt.state else 0


def failover_worker(rank: int, world_size: int, steps: int = 6, kill_step: int | None = 3, kill_rank: int = 1,
                    microbatches: int = 2, model: dict[str, Any] | None = None, batch_size: int = 4, seed: int = 0,
                    lr: float = LR, comm_timeout: float = 10.0) -> dict[str, Any]:
    """(Runs in a rank.) Train with RC; on a failed send or receive, take over the peer's stage and go on alone.

    The step in flight when the peer died is discarded (its gradients zeroed) and run again on both
    stages locally; completed steps are never redone, which the replica's AdamW step counter shows.
    """
    cfg, stages, opts = _stages(model, seed, lr)
    own, rep = stages[rank], stages[1 - rank]
    data = batches(batch_size, cfg.seq_len, seed)
    out: dict[str, Any] = {"rank": rank, "losses": [], "modes": [], "step_s": [], "failed_at": None,
                           "resumed_from": None, "detect_s": None, "error": "", "redundant_matched": True}
    for step in range(steps):
        x, y = data(step)
        t0 = time.perf_counter()
        loss = None
        if out["failed_at"] is None:
            try:
                loss, same = _pipeline_step(rank, own, rep, x, y, microbatches,
                                            rank == kill_rank and step == kill_step, comm_timeout)
                out["redundant_matched"] &= same
            except RuntimeError as err:  # gloo: connection reset by peer, or a timeout
                out.update(failed_at=step, detect_s=time.perf_counter() - t0, error=str(err).splitlines()[0][:160],
                           resumed_from=_updates(opts[1 - rank]))
                for o in opts:
                    o.zero_grad(set_to_none=True)
        if loss is None:
            loss = _local_step(stages[0], stages[1], x, y, microbatches)
        for o in opts:
            optimizer_step(o)
        out["losses"].append(loss)
        out["modes"].append("pipeline + RC" if out["failed_at"] is None else "alone (failover)")
        out["step_s"].append(time.perf_counter() - t0)
    out["state"] = {f"stage{k}.{n}": t.detach().clone() for k, s in enumerate(stages) for n, t in s.named_parameters()}
    out["replica_bytes"] = _state_bytes(rep, opts[1 - rank])
    out["replica_params"] = sum(t.numel() for t in rep.parameters())
    return out


def reference_run(steps: int = 6, microbatches: int = 2, model: dict[str, Any] | None = None, batch_size: int = 4,
                  seed: int = 0, lr: float = LR) -> tuple[list[float], dict[str, torch.Tensor]]:
    """The uninterrupted run in this process, both stages, one thread (as the ranks): losses and parameters."""
    cfg, stages, opts = _stages(model, seed, lr)
    data, losses, threads = batches(batch_size, cfg.seq_len, seed), [], torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for step in range(steps):
            losses.append(_local_step(stages[0], stages[1], *data(step), microbatches))
            for o in opts:
                optimizer_step(o)
    finally:
        torch.set_num_threads(threads)
    return losses, {f"stage{k}.{n}": t.detach().clone() for k, s in enumerate(stages) for n, t in s.named_parameters()}


@dataclass(frozen=True)
class FailoverRun:
    """A 2-rank RC run where ``killed_rank`` was SIGKILLed at ``kill_step``, beside the uninterrupted reference.

    Checkable: exit codes, the failover step, steps lost, bit-identity. Wall-clock (shown, never
    asserted): ``step_s_before`` (pipeline with RC), ``step_s_after`` (the survivor alone), ``detect_s``.
    """

    killed_rank: int | None
    exit_codes: tuple[int, ...]
    survivor: int
    failed_at: int | None
    resumed_from: int | None
    losses: tuple[float, ...]
    reference_losses: tuple[float, ...]
    losses_identical: bool
    params_identical: bool
    redundant_matched: bool  # every redundant activation / gradient equalled the one received
    replica_bytes: int
    replica_params: int
    modes: tuple[str, ...]
    error: str
    step_s_before: float
    step_s_after: float
    detect_s: float | None

    @property
    def steps_lost(self) -> int:
        """Completed steps redone after the failure: the failed step minus the replica's update count."""
        return 0 if self.failed_at is None else self.failed_at - (self.resumed_from or 0)

    @property
    def predicted_replica_bytes(self) -> int:
        """fp32 weights and AdamW's two fp32 moments: 12 bytes per replica parameter between steps."""
        return 12 * self.replica_params


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else float("nan")


def run_failover(steps: int = 6, kill_step: int | None = 3, kill_rank: int = 1, microbatches: int = 2,
                 model: dict[str, Any] | None = None, batch_size: int = 4, seed: int = 0, lr: float = LR,
                 timeout: float = 60.0) -> FailoverRun:
    """Launch 2 gloo ranks with RC, SIGKILL ``kill_rank`` after its first send of step ``kill_step``, compare.

    ``labkit.dist.run`` stops a whole group when one rank dies (the right thing without RC); here
    the dead rank is expected, so this launches with ``labkit.dist.run_outcomes``, which waits for
    the survivor (loopback only, every child killed and reaped on return).
    """
    require_positive("steps", steps)
    require_choice("kill_rank", kill_rank, (0, 1))
    if kill_step is not None:
        require_choice("kill_step", kill_step, range(steps))
    require_divides("microbatches", require_positive("microbatches", microbatches), "batch_size",
                    require_positive("batch_size", batch_size))
    require_positive("timeout", timeout, integer=False)
    ref_losses, ref_state = reference_run(steps, microbatches, model, batch_size, seed, lr)  # also checks the model
    kwargs = {"steps": steps, "kill_step": kill_step, "kill_rank": kill_rank, "microbatches": microbatches,
              "model": model, "batch_size": batch_size, "lr": lr, "comm_timeout": min(10.0, timeout / 3)}
    worker = partial(failover_worker, seed=seed)  # run_outcomes keeps its own ``seed`` (torch's, in each rank)
    outcomes = ldist.run_outcomes(worker, 2, timeout=timeout, threads=1, seed=seed, **kwargs)
    for o in outcomes:
        if o.status == "raised":
            raise ldist.WorkerError(o.rank, o.error, o.remote_traceback)
    results = {o.rank: o.result for o in outcomes if o.status == "ok"}
    codes = tuple(o.exit_code for o in outcomes)
    survivor = 1 - kill_rank if kill_step is not None else 1
    if survivor not in results:
        raise ldist.WorkerError(survivor, f"the survivor exited with code {codes[survivor]} without a result", "")
    out = results[survivor]
    same = all(torch.equal(out["state"][k], v) for k, v in ref_state.items())
    before = [t for t, mode in zip(out["step_s"], out["modes"], strict=True) if mode == "pipeline + RC"][1:]
    after = [t for t, mode in zip(out["step_s"], out["modes"], strict=True) if mode != "pipeline + RC"][1:]
    return FailoverRun(
        kill_rank if kill_step is not None else None, codes, survivor, out["failed_at"], out["resumed_from"],
        tuple(out["losses"]), tuple(ref_losses), out["losses"] == ref_losses, same,
        all(r["redundant_matched"] for r in results.values()), out["replica_bytes"], out["replica_params"],
        tuple(out["modes"]), out["error"], _mean(before), _mean(after), out["detect_s"],
    )  # fmt: skip
