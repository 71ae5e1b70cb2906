"""An analog crossbar that computes a layer where its weights live, with the errors that come with it.

Written by hand: no maintained library simulates analog in-memory matrix-vector products at
this level of detail in PyTorch in a few lines (IBM's aihwkit does far more, with a C++/CUDA
build this lab does not need). The model follows ISAAC and PRIME (Shafiee et al., ISCA 2016;
Chi et al., ISCA 2016):

* weights become conductances: each weight is a differential pair G+ - G- of two devices,
  each in [0, G_max] and quantized to 2**weight_bits levels; a tile of ``rows x cols`` devices
  is programmed with its own scale (the largest |w| of the tile maps to G_max);
* inputs become voltages on the rows: each vector is scaled by its largest |x| and quantized
  by a DAC with ``dac_bits`` (signed, 2**(bits-1) - 1 levels each side);
* each column sums its currents I_j = sum_i V_i (G+_ij - G-_ij) (Ohm and Kirchhoff), with read
  noise: every device's conductance wobbles by N(0, (noise * G_max)^2) on each read, which adds
  N(0, 2 (noise G_max)^2 sum_i V_i^2) to a column current (the same distribution, drawn once per
  column, from a seeded ``torch.Generator``);
* an ADC with ``adc_bits`` converts each column; its full scale is the largest current the
  programmed column could carry (``"column"``) or the largest of its tile (``"tile"``); currents
  beyond it clip;
* ``reads`` > 1 reads every column that many times, converts each read and averages them
  digitally: the read noise falls as 1/sqrt(reads), at ``reads`` times the conversions (the
  energy model, ``pim.mvm_energy``, counts them as input cycles);
* a matrix larger than one array is split into tiles; partial sums are rescaled and added
  digitally, and the bias is added digitally.

``None`` bits mean an ideal converter (no quantization): with no noise the crossbar then equals
``nn.Linear`` to float precision, which the tests check. The attention scores (activation times
activation) and the tied ``lm_head`` stay digital: a crossbar holds fixed weights.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import torch
import torch.nn as nn
import torch.nn.functional as F

from labkit.errors import LabkitError, require_choice, require_positive
from labkit.rig.data import batches, vocab_size
from labkit.rig.model import GPTConfig
from labkit.rig.train import TrainConfig, Trainer

ADC_RANGES = ("column", "tile")
ANALOG_LAYERS = ("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj")
SWEEP_FIELDS = ("adc_bits", "dac_bits", "weight_bits", "noise", "array_size", "reads")
MAX_BITS = 16


def _bits(field: str, value: int | None, least: int) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or not least <= value <= MAX_BITS:
        raise LabkitError(f"{field} must be an integer from {least} to {MAX_BITS}, or None for ideal (got {value!r})")


@dataclass(frozen=True)
class CrossbarConfig:
    """Array size, converter resolutions, read noise (a fraction of G_max) and the noise seed."""

    rows: int = 128
    cols: int = 128
    weight_bits: int | None = None
    dac_bits: int | None = None
    adc_bits: int | None = None
    noise: float = 0.0
    adc_range: str = "column"
    seed: int = 0
    reads: int = 1

    def __post_init__(self) -> None:
        require_positive("rows", self.rows)
        require_positive("cols", self.cols)
        _bits("weight_bits", self.weight_bits, 1)
        _bits("dac_bits", self.dac_bits, 2)
        _bits("adc_bits", self.adc_bits, 2)
        n = self.noise
        if isinstance(n, bool) or not isinstance(n, (int, float)) or not math.isfinite(n) or not 0 <= n <= 1:
            raise LabkitError(f"noise must be a fraction of G_max between 0 and 1 (got {n!r})")
        require_choice("adc_range", self.adc_range, ADC_RANGES)
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise LabkitError(f"seed must be an integer (got {self.seed!r})")
        require_positive("reads", self.reads)


def _quantize(t: torch.Tensor, levels: int) -> torch.Tensor:
    """Round ``t`` (in units of full scale) to ``levels`` steps per unit, clipping at +-1."""
    return torch.round(t * levels).clamp(-levels, levels) / levels


def _compute_dtype(t: torch.Tensor) -> torch.dtype:
    """The crossbar simulates in fp32, or in fp64 for a model trained in fp64 (``tiny_trainer``'s default):
    its printed losses are then the same on every CPU, whose fp32 kernels differ in the last bits."""
    return torch.float64 if t.dtype == torch.float64 else torch.float32


class AnalogLinear(nn.Module):
    """A trained ``nn.Linear`` programmed into crossbar tiles; ``forward`` is the analog read."""

    def __init__(self, linear: nn.Linear, cfg: CrossbarConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.dtype = _compute_dtype(linear.weight)
        w = linear.weight.detach().to(self.dtype).t()  # (in, out): inputs drive rows, outputs are columns
        self.row_slices = [slice(r, min(r + cfg.rows, self.in_features)) for r in range(0, self.in_features, cfg.rows)]
        col_slices = [slice(c, min(c + cfg.cols, self.out_features)) for c in range(0, self.out_features, cfg.cols)]
        g = torch.zeros_like(w)  # G+ - G-, in units of G_max
        scale = torch.zeros(len(self.row_slices), self.out_features, dtype=self.dtype)  # weight per unit conductance
        full = torch.zeros(len(self.row_slices), self.out_features, dtype=self.dtype)  # ADC full scale per column
        for i, rs in enumerate(self.row_slices):
            for cs in col_slices:
                tile = w[rs, cs]
                w_max = float(tile.abs().max()) or 1.0
                pos, neg = (tile / w_max).clamp(min=0), (-tile / w_max).clamp(min=0)
                if cfg.weight_bits is not None:
                    levels = 2**cfg.weight_bits - 1
                    pos, neg = torch.round(pos * levels) / levels, torch.round(neg * levels) / levels
                g[rs, cs] = pos - neg
                scale[i, cs] = w_max
                reach = (pos - neg).abs().sum(0)  # the largest current each column can carry at |V| <= 1
                full[i, cs] = reach.max() if cfg.adc_range == "tile" else reach
        self.register_buffer("g", g)
        self.register_buffer("scale", scale)
        self.register_buffer("full_scale", full.clamp(min=1e-12))
        self.bias = None if linear.bias is None else nn.Parameter(linear.bias.detach().clone(), requires_grad=False)
        self.generator = torch.Generator().manual_seed(cfg.seed)

    @property
    def tiles(self) -> int:
        """Arrays this layer occupies: row tiles x column tiles."""
        return len(self.row_slices) * -(-self.out_features // self.cfg.cols)

    def reseed(self, seed: int | None = None) -> None:
        """Restart the noise stream, so the same inputs give the same noisy outputs again."""
        self.generator.manual_seed(self.cfg.seed if seed is None else seed)

    @torch.no_grad()
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        cfg, shape = self.cfg, x.shape
        x = x.reshape(-1, self.in_features).to(self.dtype)
        x_scale = x.abs().amax(dim=1, keepdim=True).clamp(min=1e-30)  # one DAC reference per vector
        v = x / x_scale
        if cfg.dac_bits is not None:
            v = _quantize(v, 2 ** (cfg.dac_bits - 1) - 1)
        y = torch.zeros(x.shape[0], self.out_features, dtype=self.dtype)
        for i, rs in enumerate(self.row_slices):
            clean = v[:, rs] @ self.g[rs]  # (n, out): Kirchhoff's sum down each column
            sigma = cfg.noise * torch.sqrt(2 * (v[:, rs] ** 2).sum(1, keepdim=True))
            current = clean.unsqueeze(0)  # (reads, n, out): every read of every column, converted, then averaged
            if cfg.noise > 0:
                draws = torch.randn((cfg.reads, *clean.shape), generator=self.generator, dtype=self.dtype)
                current = current + sigma * draws
            if cfg.adc_bits is not None:
                fs = self.full_scale[i]
                current = _quantize(current / fs, 2 ** (cfg.adc_bits - 1) - 1) * fs
            current = current.mean(0)  # digital average of the reads
            y += current * self.scale[i]  # digital: rescale the partial sum and add it
        y = y * x_scale
        if self.bias is not None:
            y = y + self.bias.to(self.dtype)
        return y.reshape(*shape[:-1], self.out_features).to(x.dtype)

    def extra_repr(self) -> str:
        return f"in={self.in_features}, out={self.out_features}, tiles={self.tiles}, {self.cfg}"


def relative_error(linear: nn.Linear, x: torch.Tensor, cfg: CrossbarConfig) -> float:
    """||analog(x) - linear(x)|| / ||linear(x)||: how far one layer's crossbar is from its digital twin."""
    with torch.no_grad():
        dt = _compute_dtype(linear.weight)
        exact = F.linear(x.to(dt), linear.weight.to(dt), None if linear.bias is None else linear.bias.to(dt))
        analog = AnalogLinear(linear, cfg)(x)
    return float((analog - exact).norm() / exact.norm().clamp(min=1e-30))


def analog_model(model: nn.Module, cfg: CrossbarConfig) -> nn.Module:
    """A copy of a tiny GPT whose blocks' linear layers run on crossbars (``ANALOG_LAYERS``).

    Each layer gets its own noise seed, derived from ``cfg.seed`` and its position; the
    embeddings, layer norms, attention scores and the tied ``lm_head`` stay digital.
    """
    twin = copy.deepcopy(model).eval()
    twin.to(_compute_dtype(next(twin.parameters())))
    for b, block in enumerate(twin.h):
        for j, name in enumerate(ANALOG_LAYERS):
            parent, attr = name.split(".")
            owner = getattr(block, parent)
            seed = cfg.seed * 1_000_003 + len(ANALOG_LAYERS) * b + j
            setattr(owner, attr, AnalogLinear(getattr(owner, attr), replace(cfg, seed=seed)))
    return twin


@torch.no_grad()
def eval_loss(model: nn.Module, trainer: Trainer, batches_: int = 2) -> float:
    """Mean validation loss of ``model`` on the trainer's first fixed validation batches (as ``Trainer.eval_loss``)."""
    require_positive("batches_", batches_)
    tc = trainer.cfg
    val = batches(tc.batch_size, tc.model.seq_len, seed=tc.seed, split="val")
    was = model.training
    model.eval()
    loss = sum(float(model(*val(i))[1]) for i in range(batches_)) / batches_
    model.train(was)
    return loss


def tiny_trainer(steps: int = 60, seed: int = 0, d_model: int = 64, precision: str = "fp64") -> Trainer:
    """A tiny GPT trained ``steps`` steps without dropout (deterministic): the model the crossbar runs.

    In fp64 by default: the crossbar's printed losses then come out the same on every CPU (an fp32
    model's last bits differ between CPUs' kernels and reach the losses' third digit through 60 steps)."""
    require_positive("steps", steps)
    model = GPTConfig(vocab_size=vocab_size(), seq_len=32, n_layer=2, n_head=4, d_model=d_model, dropout=0.0)
    trainer = Trainer(TrainConfig(model=model, batch_size=8, lr=3e-3, seed=seed, precision=precision))
    trainer.run(steps)
    return trainer


@dataclass(frozen=True)
class LossPoint:
    """One crossbar setting and the validation loss the analog model reached with it."""

    setting: float | int | None
    loss: float
    digital_loss: float

    @property
    def gap(self) -> float:
        return self.loss - self.digital_loss


@dataclass(frozen=True)
class LossSweep:
    """Loss against one crossbar field, every other field at ``base``; the digital loss beside it."""

    field: str
    base: CrossbarConfig
    digital_loss: float
    points: tuple[LossPoint, ...]

    def rows(self) -> list[tuple[str, float, float, float]]:
        """(setting, analog loss, digital loss, gap) rounded for printing: identical run to run."""
        return [("ideal" if p.setting is None else f"{p.setting:g}", round(p.loss, 4), round(p.digital_loss, 4),
                 round(p.gap, 4)) for p in self.points]  # fmt: skip


def configure(base: CrossbarConfig, field: str, value: float | int | None) -> CrossbarConfig:
    """``base`` with one field changed; ``array_size`` sets square arrays (rows = cols)."""
    require_choice("field", field, SWEEP_FIELDS)
    if field == "array_size":
        return replace(base, rows=value, cols=value)
    return replace(base, **{field: value})


def sweep(trainer: Trainer, field: str, values: Sequence[float | int | None],
          base: CrossbarConfig | None = None, batches_: int = 2) -> LossSweep:
    """Validation loss of the trained model on crossbars, for each value of ``field``."""
    base = base or CrossbarConfig()
    digital = eval_loss(trainer.model, trainer, batches_)
    points = tuple(LossPoint(v, eval_loss(analog_model(trainer.model, configure(base, field, v)), trainer, batches_),
                             digital) for v in values)  # fmt: skip
    return LossSweep(field, base, digital, points)
