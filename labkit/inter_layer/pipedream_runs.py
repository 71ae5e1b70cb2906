"""Running PipeDream's stages on local ranks: the stash modes side by side, and the reference curve.

``labkit.inter_layer.pipedream`` holds one stage's mechanics (weight versions, 1F1B without a
flush); this module starts the ranks, collects their ``StageReport`` s, and gives the two things a
learner compares them with: synchronous training on the same data (the loss curve without
staleness), and, with ``verify``, each backward's true gradient (at the weights its forward used).
Narayanan et al., "PipeDream", SOSP 2019, section 3.3 (weight stashing), on why stashing is
needed: without it a mini-batch's backward pass uses other weights than its forward pass did, so
the gradient it applies is not the gradient of any one version of the weights.
``gradient_errors`` measures how far off it is.
"""

from __future__ import annotations

import statistics
from typing import Any

import torch

from labkit import dist as labdist
from labkit.errors import LabkitError, require_positive
from labkit.inter_layer.pipedream import (
    STASH_MODES,
    StageReport,
    build_stage,
    check_options,
    model_config,
    train_pipedream,
)
from labkit.rig.data import batches
from labkit.rig.step import Loop, training_step


def train_stash_modes(rank: int, world_size: int, modes: list[str], **kwargs: Any) -> dict[str, dict[str, Any]]:
    """Several stash modes one after the other in one process group: one start-up pays for all."""
    return {m: train_pipedream(rank, world_size, stash=m, **kwargs) for m in modes}


def compare_stash_modes(p: int, minibatches: int, modes: tuple[str, ...] = STASH_MODES,
                        model: dict[str, Any] | None = None, batch_size: int = 8, seed: int = 0, lr: float = 3e-3,
                        every: int = 0, verify: bool = False, timeout: float = 120.0) -> dict[str, list[StageReport]]:
    """Train the same pipeline once per stash mode on p local ranks; reports per mode, in rank order."""
    if not modes:
        raise LabkitError(f"modes must name at least one of {', '.join(STASH_MODES)} (got none)")
    for stash in modes:
        check_options(p, minibatches, stash, model_config(model), every)
    out = labdist.run(train_stash_modes, p, timeout=timeout, threads=1, modes=list(modes), minibatches=minibatches,
                      model=model, batch_size=batch_size, seed=seed, lr=lr, every=every, verify=verify)
    return {m: [StageReport(**r[m]) for r in out] for m in modes}


def run_pipedream(p: int, minibatches: int, stash: str = "pipedream", model: dict[str, Any] | None = None,
                  batch_size: int = 8, seed: int = 0, lr: float = 3e-3, every: int = 0, verify: bool = False,
                  timeout: float = 120.0) -> list[StageReport]:
    """Train ``minibatches`` mini-batches through a p-stage asynchronous pipeline on p local ranks."""
    return compare_stash_modes(p, minibatches, (stash,), model, batch_size, seed, lr, every, verify, timeout)[stash]


def synchronous_1f1b_losses(minibatches: int, model: dict[str, Any] | None = None, batch_size: int = 8,
                            seed: int = 0, lr: float = 3e-3) -> list[float]:
    """The reference curve: the same untied model, data and AdamW, one update after every mini-batch.

    Synchronous 1F1B with a flush after each mini-batch computes exactly this (the schedule moves work
    in time, not the math), so one process stands in for it; the asynchronous curve differs by staleness.
    """
    require_positive("minibatches", minibatches)
    cfg = model_config(model)
    net = build_stage(cfg, seed, 0, 1)
    opt = torch.optim.AdamW(net.parameters(), lr=lr, weight_decay=0.0, foreach=False)
    loop = Loop(net, opt, batches(batch_size, cfg.seq_len, seed), loss=lambda m, batch: m(*batch))
    return [training_step(loop, i) for i in range(minibatches)]


def train_grid(rank: int, world_size: int, runs: list[dict[str, Any]], **kwargs: Any) -> list[dict[str, Any]]:
    """(Runs in a rank.) Several (stash, lr) runs one after the other in one process group."""
    return [train_pipedream(rank, world_size, **{**kwargs, **r}) for r in runs]


def gradient_errors(p: int, minibatches: int, lrs: tuple[float, ...], modes: tuple[str, ...] = STASH_MODES,
                    model: dict[str, Any] | None = None, batch_size: int = 8, seed: int = 0,
                    timeout: float = 120.0, dtype: str = "fp32") -> dict[tuple[float, str], list[StageReport]]:
    """Each mode at each learning rate, with ``verify``: per stage, every backward's gradient beside the
    true one. Keys (lr, mode), reports in rank order. ``dtype="fp64"`` makes the printed errors the same
    on every CPU (at a high learning rate fp32's last-bit differences grow into the error's 2nd digit)."""
    if not lrs or not modes:
        raise LabkitError("lrs and modes must each name at least one value (got none)")
    for lr in lrs:
        require_positive("lr", lr, integer=False)
    for stash in modes:
        check_options(p, minibatches, stash, model_config(model))
    runs = [{"stash": m, "lr": lr} for lr in lrs for m in modes]
    out = labdist.run(train_grid, p, timeout=timeout, threads=1, runs=runs, minibatches=minibatches, model=model,
                      batch_size=batch_size, seed=seed, verify=True, dtype=dtype)
    return {(r["lr"], r["stash"]): [StageReport(**ranks[n]) for ranks in out] for n, r in enumerate(runs)}


def error_summary(stages: list[StageReport]) -> list[tuple[float, float]]:
    """Per stage: median and largest relative gradient error over the mini-batches (0 where exact)."""
    return [(statistics.median(s.grad_error), max(s.grad_error)) for s in stages]


def mean_loss(losses: list[float], last: int) -> float:
    """Mean of the last ``last`` losses: one number per curve, steadier than the final loss."""
    require_positive("last", last)
    return statistics.fmean(losses[-last:])
