"""The training run that gets killed: resume from the newest valid checkpoint, train, checkpoint every K steps.

Run as a program (``python -m labkit.resilience.worker --dir D --steps N --every K``), in a
child process started by :mod:`labkit.resilience.crash`, or on every rank of a gloo group
(:func:`group_worker` under ``labkit.dist.run``). It appends one JSON line per event to
``D/events-rank<r>.jsonl`` (resume, step with its loss as an exact hex float, save, done with
digests of the final state), which is how the parent follows it and judges the outcome.

``--kill-step S --kill-phase P`` makes the process SIGKILL itself at a chosen point:
``step`` (during step S, after the backward pass and before the optimizer step),
``written`` (the checkpoint of step S is on disk but has no manifest yet) or ``manifest``
(manifest durable, rename not done). A self-inflicted SIGKILL is as abrupt as one from
outside (no handler, no flush, no cleanup) and lands at an exact, repeatable point.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.distributed as dist

from labkit.errors import require_choice, require_positive
from labkit.resilience.checkpoint import save_checkpoint
from labkit.resilience.scan import resume
from labkit.resilience.state import digest, flat_state
from labkit.rig.data import vocab_size
from labkit.rig.model import GPTConfig
from labkit.rig.step import NO_HOOKS, StepHooks, training_step
from labkit.rig.train import TrainConfig, Trainer

KILL_PHASES = ("step", "written", "manifest")


def micro_config(seed: int = 0, d_model: int = 32, n_layer: int = 2, seq_len: int = 16,
                 batch_size: int = 4) -> TrainConfig:
    """The tiny run every crash experiment uses: one thread, so bits repeat across processes."""
    model = GPTConfig(vocab_size=vocab_size(), seq_len=seq_len, n_layer=n_layer, n_head=2, d_model=d_model)
    return TrainConfig(model=model, batch_size=batch_size, seed=seed, threads=1)


def events_path(root: str | Path, rank: int = 0) -> Path:
    return Path(root) / f"events-rank{rank}.jsonl"


def read_events(root: str | Path, rank: int = 0) -> list[dict]:
    """Every event the runs in ``root`` logged, in order (a line cut by a kill is dropped)."""
    path = events_path(root, rank)
    return parse_events(path.read_text().splitlines() if path.exists() else [])


def parse_events(lines: list[str]) -> list[dict]:
    """JSON events from log lines, skipping a line a kill cut in half."""
    out = []
    for line in lines:
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            pass
    return out


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def train_and_checkpoint(trainer: Trainer, root: str | Path, steps: int, every: int, *, rank: int = 0,
                         kill_step: int | None = None, kill_phase: str = "step",
                         step_fn: Callable[[int], torch.Tensor] | None = None) -> int:
    """Resume from ``root``, train to ``steps``, save every ``every`` steps and at the end; returns steps run here."""
    require_positive("steps", steps)
    require_positive("every", every)
    require_choice("kill_phase", kill_phase, KILL_PHASES)
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    with open(events_path(root, rank), "a", buffering=1) as log:  # line-buffered: each event reaches the kernel

        def emit(**event: object) -> None:
            log.write(json.dumps({**event, "pid": os.getpid(), "t": time.time()}) + "\n")

        scan = resume(trainer, root)
        emit(event="resume", step=trainer.steps_done, rejected=[[r.name, r.reason] for r in scan.rejected])
        start = trainer.steps_done
        for i in range(start, steps):
            dies_here = kill_phase == "step" and kill_step == i
            loss = step_fn(i) if step_fn else _plain_step(trainer, i, dies_here)
            emit(event="step", step=i, loss=float(loss).hex())
            if (i + 1) % every == 0 or i + 1 == steps:
                dies_in_save = kill_phase != "step" and kill_step == i + 1
                emit(event="saving", step=i + 1)
                save_checkpoint(trainer, root, hook=_killer(kill_phase) if dies_in_save else None)
                emit(event="save", step=i + 1)
        state = flat_state(trainer, rank)
        emit(event="done", step=trainer.steps_done, params=digest(state, "model/"), state=digest(state))
    return steps - start


def _killer(phase: str) -> Callable[[str], None]:
    return lambda now: _die() if now == phase else None


def _plain_step(trainer: Trainer, i: int, dies_here: bool) -> float:
    return training_step(trainer, i, StepHooks(after_backward=lambda _: _die()) if dies_here else NO_HOOKS)


def group_worker(rank: int, world: int, root: str, steps: int, every: int, seed: int = 0,
                 kill_rank: int | None = None, kill_step: int | None = None, kill_phase: str = "step",
                 reference_root: str | None = None) -> int:
    """Data-parallel training on a gloo group (``labkit.dist.run``): rank r trains on batch ``step*world + r``.

    Gradients are averaged with ``all_reduce``; DCP writes one checkpoint for the group.
    ``kill_rank`` SIGKILLs itself at the chosen point; its peer then fails inside a collective.
    ``reference_root`` first trains an uninterrupted run there, from a fresh (reseeded)
    Trainer, in the same processes: a group start saved.
    """
    if reference_root is not None:
        group_worker(rank, world, reference_root, steps, every, seed)
    trainer = Trainer(micro_config(seed=seed))
    params = [p for p in trainer.model.parameters() if p.requires_grad]

    def step(i: int) -> torch.Tensor:
        losses: list[torch.Tensor] = []

        def average(loss: torch.Tensor) -> None:
            if rank == kill_rank and kill_phase == "step" and kill_step == i:
                _die()
            for p in params:
                dist.all_reduce(p.grad)
                p.grad.div_(world)
            losses.append(loss.detach().clone())

        training_step(trainer, i * world + rank, StepHooks(after_backward=average))
        trainer.steps_done = i + 1
        total = losses[0]
        dist.all_reduce(total)
        return total / world

    mine = kill_phase != "step" and rank == kill_rank
    return train_and_checkpoint(trainer, root, steps, every, rank=rank, kill_step=kill_step if mine else None,
                                kill_phase=kill_phase, step_fn=step)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m labkit.resilience.worker", description=__doc__.splitlines()[0])
    p.add_argument("--dir", required=True)
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--every", type=int, required=True)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--kill-step", type=int, default=None)
    p.add_argument("--kill-phase", default="step", choices=KILL_PHASES)
    a = p.parse_args(argv)
    trainer = Trainer(micro_config(seed=a.seed))
    train_and_checkpoint(trainer, a.dir, a.steps, a.every, kill_step=a.kill_step, kill_phase=a.kill_phase)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
