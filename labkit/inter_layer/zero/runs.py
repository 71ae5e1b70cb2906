"""ZeRO-DP runs on local ranks, and the one-process reference they must match."""

from __future__ import annotations

from typing import Any

import torch

from labkit import dist as ldist
from labkit.inter_layer.zero.engines import LR, STRATEGIES, check, model_config
from labkit.inter_layer.zero.worker import RankResult, train_jobs
from labkit.rig.train import TrainConfig, Trainer


def run_jobs(jobs: list[dict], world_size: int = 2, timeout: float = 180.0) -> list[list[RankResult]]:
    """Run each job (keyword arguments of ``train_rank``) on ``world_size`` local ranks; per job, per rank."""
    for job in jobs:
        job = {"strategy": "zero3", "steps": 5, "batch_size": 8, **job}
        check(job["strategy"], world_size, job["batch_size"], job["steps"])
        model_config(job.get("model"))
    out = ldist.run(train_jobs, world_size, timeout=timeout, threads=1, jobs=tuple(jobs))
    return [[RankResult(**rank[j]) for rank in out] for j in range(len(jobs))]


def run_strategies(strategies: tuple[str, ...] = tuple(STRATEGIES), world_size: int = 2, steps: int = 5,
                   timeout: float = 180.0, **kwargs: Any) -> dict[str, list[RankResult]]:
    """Train each strategy on the same ranks (``kwargs``: model, batch_size, seed, crosscheck); per-rank results."""
    jobs = [{"strategy": s, "steps": steps, **kwargs} for s in strategies]
    return dict(zip(strategies, run_jobs(jobs, world_size, timeout), strict=True))


def run_strategy(strategy: str, world_size: int = 2, steps: int = 5, **kwargs: Any) -> list[RankResult]:
    """Train one strategy on ``world_size`` local ranks (``kwargs`` as ``run_strategies``)."""
    return run_strategies((strategy,), world_size, steps, **kwargs)[strategy]


def single_process_losses(steps: int = 5, model: dict | None = None, batch_size: int = 8, seed: int = 0,
                          threads: int = 1) -> list[float]:
    """The reference curve: one process, the full batch ``i`` at step ``i``, same seed and AdamW."""
    before = torch.get_num_threads()
    try:
        cfg = TrainConfig(model=model_config(model), batch_size=batch_size, lr=LR, seed=seed, threads=threads)
        return Trainer(cfg).run(steps)
    finally:
        torch.set_num_threads(before)
