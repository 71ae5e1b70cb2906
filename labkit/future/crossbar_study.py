"""Studies on the crossbar: the trained layer the design panel runs, and sweeps over several noise seeds.

Read noise is random, so one seed shows one draw: ``seed_sweep`` repeats a loss sweep
(``crossbar.sweep``) for several seeds of the noise and reports the spread of the loss gap
(mean, smallest, largest) at each setting. ``layer_inputs`` takes one trained linear layer of
the tiny GPT and the inputs it really sees on a validation batch, recorded with a forward hook,
so the panel's error is the trained layer's, not a random one's.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace

import torch
import torch.nn as nn

from labkit.errors import LabkitError, require_choice
from labkit.future.crossbar import ANALOG_LAYERS, CrossbarConfig, sweep
from labkit.rig.data import batches
from labkit.rig.train import Trainer


def layer_inputs(trainer: Trainer, layer: str = "mlp.c_proj", block: int = 0) -> tuple[nn.Linear, torch.Tensor]:
    """The trained ``layer`` of ``block`` and the inputs it receives on the first validation batch."""
    require_choice("layer", layer, ANALOG_LAYERS)
    blocks = trainer.model.h
    if isinstance(block, bool) or not isinstance(block, int) or not 0 <= block < len(blocks):
        raise LabkitError(f"block must be an integer from 0 to {len(blocks) - 1} (got {block!r})")
    parent, attr = layer.split(".")
    linear = getattr(getattr(blocks[block], parent), attr)
    seen: list[torch.Tensor] = []
    hook = linear.register_forward_hook(lambda m, inp, out: seen.append(inp[0].detach().clone()))
    tc = trainer.cfg
    val = batches(tc.batch_size, tc.model.seq_len, seed=tc.seed, split="val")
    was = trainer.model.training
    trainer.model.eval()
    try:
        with torch.no_grad():
            trainer.model(*val(0))
    finally:
        hook.remove()
        trainer.model.train(was)
    return linear, seen[0].reshape(-1, linear.in_features)


@dataclass(frozen=True)
class SeedPoint:
    """One setting's loss gap (analog - digital) over several noise seeds."""

    setting: float | int | None
    gaps: tuple[float, ...]

    @property
    def mean(self) -> float:
        return statistics.fmean(self.gaps)

    @property
    def spread(self) -> tuple[float, float]:
        return min(self.gaps), max(self.gaps)


@dataclass(frozen=True)
class SeedSweep:
    """A loss sweep repeated for ``seeds``: the digital loss and the gap's spread per setting."""

    field: str
    seeds: tuple[int, ...]
    digital_loss: float
    points: tuple[SeedPoint, ...]

    def rows(self) -> list[tuple[str, float, float, float, float]]:
        """(setting, digital loss, mean gap, smallest gap, largest gap), rounded: identical run to run."""
        return [("ideal" if p.setting is None else f"{p.setting:g}", round(self.digital_loss, 4), round(p.mean, 4),
                 round(p.spread[0], 4), round(p.spread[1], 4)) for p in self.points]


def seed_sweep(trainer: Trainer, field: str, values: Sequence[float | int | None], seeds: Sequence[int],
               base: CrossbarConfig | None = None, batches_: int = 2) -> SeedSweep:
    """``crossbar.sweep`` once per noise seed; the gap at each setting over all the seeds."""
    if not seeds:
        raise LabkitError("seeds must name at least one seed (got none)")
    base = base or CrossbarConfig()
    runs = [sweep(trainer, field, values, replace(base, seed=s), batches_) for s in seeds]
    points = tuple(SeedPoint(v, tuple(r.points[k].gap for r in runs)) for k, v in enumerate(values))
    return SeedSweep(field, tuple(seeds), runs[0].digital_loss, points)
