"""Pipeline runs on local ranks, their timelines, and what the schedules predict for them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from labkit import dist as ldist
from labkit.errors import require_positive
from labkit.inter_layer.pipeline.stages import LR, build_model, check_pipeline, model_config
from labkit.inter_layer.pipeline.worker import train_pipelines
from labkit.rig.data import batches
from labkit.rig.step import Loop, training_step
from labkit.sim import Action, Event, Timeline, bubble_fraction, schedule


def predicted_peak_bytes(actions: list[Action], stage_bytes: dict[int, int]) -> int:
    """Replay a rank's order: F of stage s adds its bytes per micro-batch, B frees them; the most held."""
    live = peak = 0
    for a in actions:
        live += stage_bytes[a.stage] if a.phase == "F" else -stage_bytes[a.stage]
        peak = max(peak, live)
    return peak


def measured_bubble(timeline: Timeline) -> float:
    """Idle share of the ranks between the first start and the last end: 1 - busy / (p * span)."""
    ranks = [s for s in timeline.streams if s.startswith("rank ")]
    events = [e for e in timeline.events if e.stream in ranks]
    if not events:
        return 0.0
    span = max(e.end for e in events) - min(e.start for e in events)
    return 1 - sum(e.duration for e in events) / (span * len(ranks)) if span > 0 else 0.0


@dataclass(frozen=True)
class PipelineConfig:
    """One run: schedule ``kind``, ``m`` micro-batches, ``v`` stages per rank, the model and the data; ``op_rounds``
    rounds of each stage's forward and backward timed alone after the steps (``PipelineRun.op_times``)."""

    kind: str
    m: int
    steps: int = 2
    v: int = 1
    model: dict[str, Any] | None = None
    batch_size: int = 8
    seed: int = 0
    lr: float = LR
    op_rounds: int = 0  # > 0: each stage's forward and backward also timed alone (pipeline.op_times)

    def worker_kwargs(self) -> dict[str, Any]:
        return {"kind": self.kind, "microbatches": self.m, "steps": self.steps, "v": self.v, "model": self.model,
                "batch_size": self.batch_size, "seed": self.seed, "lr": self.lr, "op_rounds": self.op_rounds}


@dataclass
class PipelineRun:
    """What each rank of one run reported, and the timeline of its last step."""

    config: PipelineConfig
    p: int
    ranks: list[dict[str, Any]]
    timeline: Timeline

    @property
    def losses(self) -> list[float]:
        return next(r["losses"] for r in self.ranks if r["losses"])

    @property
    def orders(self) -> dict[int, list[Action]]:
        """Each rank's compute actions of the last step, in the order they ran."""
        return {r["rank"]: r["orders"][-1] for r in self.ranks}

    @property
    def peak_microbatches(self) -> list[float]:
        """Measured peak of saved activations per rank, in micro-batches of that rank."""
        return [r["peak_bytes"] / r["microbatch_bytes"] for r in self.ranks]

    @property
    def predicted_microbatches(self) -> list[float]:
        """The peak ``labkit.sim.schedule``'s order implies per rank, in micro-batches (chunks weighted by bytes)."""
        c = self.config
        order = schedule(c.kind, self.p, c.m, c.v)
        return [predicted_peak_bytes(order[r["rank"]], r["stage_bytes"]) / r["microbatch_bytes"] for r in self.ranks]

    @property
    def op_times(self) -> dict[tuple[int, str], list[float]]:
        """(stage, phase) -> seconds of each round that stage's forward or backward took alone (see op_times)."""
        return {k: v for r in self.ranks for k, v in r.get("op_times", {}).items()}

    @property
    def bubble(self) -> float:
        return measured_bubble(self.timeline)

    @property
    def predicted_bubble(self) -> float:
        return bubble_fraction(self.p, self.config.m, self.config.v)

    @property
    def step_seconds(self) -> float:
        """Wall time of the timeline's step, from the first start to the last end."""
        return self.timeline.makespan


def timeline_of(ranks: list[dict[str, Any]], step: int = -1) -> Timeline:
    """The measured events of one step as a ``labkit.sim.Timeline`` (0 = its first start), for ``plots.gantt``."""
    step = step % (1 + max(e[0] for r in ranks for e in r["events"]))
    rows = [(r["rank"], e) for r in ranks for e in r["events"] if e[0] == step]
    t0 = min(e[4] for _, e in rows)
    return Timeline([Event(str(Action(s, ph, i)), f"rank {rank}", a - t0, b - t0, ph,
                           {"stage": s, "microbatch": i, "phase": ph})
                     for rank, (_, s, ph, i, a, b) in sorted(rows, key=lambda r: (r[0], r[1][4]))])


def run_pipelines(p: int, configs: list[PipelineConfig], timeout: float = 120.0) -> list[PipelineRun]:
    """Run each config in turn on the same p local ranks (gloo, one thread each); checked before any start."""
    for c in configs:
        check_pipeline(c.kind, p, c.m, c.v, model_config(c.model), c.batch_size, c.steps)
    out = ldist.run(train_pipelines, p, timeout=timeout, threads=1, configs=[c.worker_kwargs() for c in configs])
    runs = [[rank_out[i] for rank_out in out] for i in range(len(configs))]
    return [PipelineRun(c, p, ranks, timeline_of(ranks)) for c, ranks in zip(configs, runs, strict=True)]


def run_pipeline(kind: str, p: int, m: int, steps: int = 2, v: int = 1, model: dict[str, Any] | None = None,
                 batch_size: int = 8, seed: int = 0, lr: float = LR, timeout: float = 120.0) -> PipelineRun:
    """Train one pipeline on p local ranks and gather what each rank saw."""
    return run_pipelines(p, [PipelineConfig(kind, m, steps, v, model, batch_size, seed, lr)], timeout)[0]


def single_process_losses(steps: int = 2, model: dict[str, Any] | None = None, batch_size: int = 8, seed: int = 0,
                          lr: float = LR) -> list[float]:
    """The same untied model, optimizer and batches in one process on the full batch: the reference losses."""
    require_positive("steps", steps)
    gpt = build_model(model_config(model), seed)
    opt = torch.optim.AdamW(gpt.parameters(), lr=lr, weight_decay=0.0, foreach=False)
    loop = Loop(gpt, opt, batches(batch_size, gpt.cfg.seq_len, seed))
    return [training_step(loop, step) for step in range(steps)]
