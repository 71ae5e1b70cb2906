"""Pipeline parallelism on real ranks: torch's GPipe, 1F1B and interleaved 1F1B, timed and weighed.

The tiny GPT is cut into p*v stages of consecutive blocks (embedding with the first;
final norm, head and loss with the last); rank r holds stages r, r+p, ... and
``torch.distributed.pipelining`` runs them. No schedule is written here: this module
watches torch's, to check two claims against a real run:

* the bubble, (p-1)/(m+p-1) of a step (Huang et al., "GPipe", NeurIPS 2019), or
  (p-1)/(v*m+p-1) with v chunks per rank (Narayanan et al., "Efficient Large-Scale
  Language Model Training on GPU Clusters Using Megatron-LM", SC 2021);
* activations held at once: GPipe keeps all m micro-batches, 1F1B (Narayanan et al.,
  "PipeDream", SOSP 2019) at most p, and p - r on rank r.

Timing: each stage's ``forward_one_chunk`` / ``backward_one_chunk`` is wrapped on the
instance, so one event is one compute action the schedule chose (torch's shape
inference runs the submodules outside them and is not counted); the loss is timed
as the end of the last stage's forward. Times are ``time.perf_counter`` minus rank 0's
value, broadcast after a barrier at each step: perf_counter reads CLOCK_MONOTONIC,
one clock for all processes of a machine (across machines the clock offsets would add).
Memory: saved tensors seen through ``saved_tensors_hooks``; a storage counts from
its first pack until autograd releases its last packed handle (backward frees them
as it goes); parameters, buffers and the batch are left out.

``TinyGPT`` ties the head to the embedding; they live on different ranks here, so the
head gets its own copy of the weight (untied), and the reference run does the same.
"""

from __future__ import annotations

import argparse
import os
import time
from dataclasses import dataclass
from functools import partial
from typing import Any

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

from labkit import dist as ldist
from labkit.errors import require_divides, require_positive
from labkit.rig.data import batches, vocab_size
from labkit.rig.model import GPTConfig, TinyGPT, config_from
from labkit.rig.step import Loop, optimizer_step, training_step
from labkit.sim import Action, Event, Timeline, bubble_fraction, schedule

DEFAULT_MODEL: dict[str, Any] = {"seq_len": 32, "n_layer": 4, "n_head": 2, "d_model": 32, "dropout": 0.0}
LR = 3e-3


def model_config(model: dict[str, Any] | None = None) -> GPTConfig:
    """The GPT of a pipeline run: ``DEFAULT_MODEL`` updated by ``model``; dropout must stay 0."""
    return config_from({"vocab_size": vocab_size(), **DEFAULT_MODEL}, model,
                       no_dropout="a pipeline run must match one process")


def check_pipeline(kind: str, p: int, m: int, v: int, cfg: GPTConfig, batch_size: int, steps: int = 1) -> None:
    """Refuse what torch's schedules refuse (see ``labkit.sim.schedule``), and splits that do not fit."""
    schedule(kind, p, m, v)
    require_positive("steps", steps)
    require_positive("batch_size", batch_size)
    require_divides("p*v (number of stages)", p * v, "n_layer", cfg.n_layer)
    require_divides("m (micro-batches)", m, "batch_size", batch_size)


def build_model(cfg: GPTConfig, seed: int = 0) -> TinyGPT:
    """The seeded TinyGPT with its head untied: ``lm_head`` gets its own copy of the embedding weight."""
    torch.manual_seed(seed)
    gpt = TinyGPT(cfg)
    gpt.lm_head.weight = nn.Parameter(gpt.wte.weight.detach().clone())
    return gpt


class StageModule(nn.Module):
    """Consecutive blocks of the GPT, with the embedding if first and ln_f + head if last."""

    def __init__(self, gpt: TinyGPT, blocks: range, first: bool, last: bool) -> None:
        super().__init__()
        self.embed = nn.ModuleDict({"wte": gpt.wte, "wpe": gpt.wpe, "drop": gpt.drop}) if first else None
        self.h = nn.ModuleList(gpt.h[i] for i in blocks)
        self.head = nn.ModuleDict({"ln_f": gpt.ln_f, "lm_head": gpt.lm_head}) if last else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.embed is not None:  # x: token ids (b, s)
            pos = torch.arange(x.size(1), device=x.device)
            x = self.embed["drop"](self.embed["wte"](x) + self.embed["wpe"](pos))  # (b, s, h)
        for block in self.h:
            x = block(x)
        if self.head is not None:
            x = self.head["lm_head"](self.head["ln_f"](x))  # (b, s, vocab)
        return x


def split_stages(gpt: TinyGPT, n_stages: int) -> list[StageModule]:
    """``n_stages`` stage modules of n_layer / n_stages blocks each, sharing the GPT's parameters."""
    per = len(gpt.h) // n_stages
    return [StageModule(gpt, range(s * per, (s + 1) * per), s == 0, s == n_stages - 1) for s in range(n_stages)]


def lm_loss(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy, as ``TinyGPT.forward`` computes it."""
    return F.cross_entropy(logits.float().view(-1, logits.size(-1)), target.view(-1))


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


class _Recorder:
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


def train_pipeline(rank: int, world_size: int, kind: str = "1f1b", microbatches: int = 4, steps: int = 1,
                   v: int = 1, model: dict[str, Any] | None = None, batch_size: int = 8, seed: int = 0,
                   lr: float = LR) -> dict[str, Any]:
    """(Runs in a rank.) Train ``steps`` steps of the pipeline; this rank's losses, events, order and bytes."""
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe, ScheduleInterleaved1F1B

    cfg, m, p = model_config(model), microbatches, world_size
    check_pipeline(kind, p, m, v, cfg, batch_size, steps)
    dev = torch.device("cpu")
    if dist.get_backend() == "nccl":  # under torchrun on GPUs (not tested here: one GPU cannot hold 2 NCCL ranks)
        dev = torch.device("cuda", int(os.environ.get("LOCAL_RANK", rank)))
        torch.cuda.set_device(dev)
    mods = [mod.to(dev) for mod in split_stages(build_model(cfg, seed), p * v)]
    mine = list(range(rank, p * v, p))
    stages = [PipelineStage(mods[s], s, p * v, dev) for s in mine]
    params = [w for s in mine for w in mods[s].parameters()]
    buffers = [b for s in mine for b in mods[s].buffers()]
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.0, foreach=False)
    rec = _Recorder(params + buffers, dev)
    rec.instrument(stages)
    loss_fn = partial(rec.timed_loss, lm_loss)
    if kind == "interleaved":
        sched = ScheduleInterleaved1F1B(stages, m, loss_fn=loss_fn)
    else:
        sched = (ScheduleGPipe if kind == "gpipe" else Schedule1F1B)(stages[0], m, loss_fn=loss_fn)
    data, first, last = batches(batch_size, cfg.seq_len, seed), 0 in mine, p * v - 1 in mine
    losses, peaks, held_after = [], [], []
    for step in range(steps):
        x, y = (t.to(dev) for t in data(step))
        rec.begin_step(step, (x, y))
        mb_losses: list[torch.Tensor] = []
        sched.step(*((x,) if first else ()), **({"target": y, "losses": mb_losses} if last else {}))
        optimizer_step(opt)
        peaks.append(rec.peak)
        held_after.append(rec.live)  # 0 when backward released every saved tensor
        if last:
            losses.append(float(torch.stack(mb_losses).detach().mean()))
    stage_bytes = {s: rec.added.get((s, 0), 0) for s in mine}
    return {
        "rank": rank, "stages": mine, "losses": losses, "peak_bytes": max(peaks), "stage_bytes": stage_bytes,
        "microbatch_bytes": sum(stage_bytes.values()), "held_after_step": held_after,
        "events": [tuple(e) for e in rec.events],
        "orders": [[Action(s, ph, i) for st, s, ph, i, *_ in rec.events if st == k] for k in range(steps)],
    }


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
    """One run: schedule ``kind``, ``m`` micro-batches, ``v`` stages per rank, the model and the data."""

    kind: str
    m: int
    steps: int = 2
    v: int = 1
    model: dict[str, Any] | None = None
    batch_size: int = 8
    seed: int = 0
    lr: float = LR

    def worker_kwargs(self) -> dict[str, Any]:
        return {"kind": self.kind, "microbatches": self.m, "steps": self.steps, "v": self.v, "model": self.model,
                "batch_size": self.batch_size, "seed": self.seed, "lr": self.lr}


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


def train_pipelines(rank: int, world_size: int, configs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """(Runs in a rank.) Several runs in one process group: the start-up (seconds) is paid once."""
    return [train_pipeline(rank, world_size, **c) for c in configs]


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


if __name__ == "__main__":  # torchrun --nproc-per-node P -m labkit.inter_layer.pipeline --schedule 1f1b ...
    parser = argparse.ArgumentParser(description="Pipeline-parallel training of the tiny GPT on this torchrun job.")
    parser.add_argument("--schedule", default="1f1b")
    parser.add_argument("--microbatches", type=int, default=4)
    parser.add_argument("--steps", type=int, default=1)
    parser.add_argument("--chunks", type=int, default=1, help="v, stages per rank (interleaved only)")
    parser.add_argument("--batch-size", type=int, default=8)
    a = parser.parse_args()
    ldist.main_under_torchrun(train_pipeline, kind=a.schedule, microbatches=a.microbatches, steps=a.steps, v=a.chunks,
                              batch_size=a.batch_size)
