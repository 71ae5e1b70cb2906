"""Mixed precision on the tiny GPT: what it saves, what it costs, and why fp16 needs loss scaling.

Four ways to train the same model (``PRECISIONS``), bytes per parameter after ZeRO (SC 2020):

* ``fp32``: fp32 weights, gradients, AdamW moments (4 + 4 + 8 = 16);
* ``bf16-autocast``: ``torch.autocast("cpu", torch.bfloat16)`` around the forward on fp32 weights:
  still 16 bytes per parameter, since autocast saves activations, not model states;
* ``bf16-mixed``: bf16 weights and gradients, fp32 master weights and moments in ``MasterWeightAdamW``
  (2 + 2 + 12 = 16, Micikevicius et al., ICLR 2018, with bf16);
* ``fp16-mixed``: the same in fp16, with loss scaling by ``torch.amp.GradScaler("cpu")`` (ibid., 3.2).

What autocast keeps for backward (``activation_prediction``, exact): Korthikanti et al.'s terms at
2 bytes, except that (1) the residual stream stays fp32 (fp32 embeddings; ``x + bf16`` promotes), so
both LayerNorm inputs, mean and rstd are fp32; (2) autocast casts each weight matrix to bf16 once per
forward and the matmul saves that copy for backward: 2 bytes per weight-matrix element per layer, plus
the tied embedding's copy for the head. CPU autocast (torch 2.13) runs softmax and GELU in bf16
(CUDA's policy runs softmax in fp32); LayerNorm gets fp32 inputs.

fp16 on the CPU in torch 2.13: every op of the tiny GPT (matmul, LayerNorm, softmax, GELU, dropout,
embedding, SDPA) runs forward and backward in fp16, about twice as slow as fp32 at d_model = 64 (no
fast fp16 kernels; timings are never asserted). GradScaler works on the CPU but refuses to unscale fp16
gradients, so ``ScaledMasterWeightAdamW`` copies them to the fp32 masters and lets it unscale those.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, replace

import torch

from labkit.errors import LabkitError, require_choice, require_positive
from labkit.measure import StepMemory
from labkit.measure.compare import Comparison
from labkit.measure.record import Record
from labkit.predict.estimate import activation_bytes_outside_layers, activation_bytes_per_layer, model_state_bytes
from labkit.rig.data import vocab_size
from labkit.rig.model import GPTConfig
from labkit.rig.train import MasterWeightAdamW, TrainConfig, Trainer
from labkit.shapes import ModelShape

PRECISIONS = ("fp32", "bf16-autocast", "bf16-mixed", "fp16-mixed")
ESTIMATE_PRECISION = {"fp32": "fp32", "bf16-autocast": "fp32", "bf16-mixed": "bf16-mixed", "fp16-mixed": "fp16-mixed"}
DEFAULT_SCALE = 2.0**16  # GradScaler's own default
LOSS_TOLERANCE = 0.02  # nats: a 16-bit run's final eval loss (and per-step losses, if no step was skipped) vs fp32


def micro_model(**overrides) -> GPTConfig:
    """The micro GPT of this notebook: 2 layers, d_model 64, 32 tokens, the corpus vocabulary."""
    return GPTConfig(**(dict(vocab_size=vocab_size(), seq_len=32, n_layer=2, n_head=4, d_model=64) | overrides))


class ScaledMasterWeightAdamW(MasterWeightAdamW):
    """fp32 master weights behind 16-bit ones, with a GradScaler between the two.

    The model's gradients hold loss * scale. ``step`` copies them to the fp32 masters, where GradScaler
    divides by the scale, skips the update if any is inf or NaN, and halves the scale on overflow (doubles
    it after ``growth_interval`` clean steps). ``scales``, ``skipped``: each step's scale, and if it was dropped.
    """

    def __init__(self, params: list[torch.nn.Parameter], lr: float, scaler: torch.amp.GradScaler) -> None:
        super().__init__(params, lr)
        self.scaler, self.scales, self.skipped = scaler, [], []

    @torch.no_grad()
    def step(self) -> None:
        for p, m in zip(self.params, self.master, strict=True):
            m.grad = None if p.grad is None else p.grad.float()
        self.scales.append(float(self.scaler.get_scale()))
        self.skipped.append(not all(bool(torch.isfinite(m.grad).all()) for m in self.master if m.grad is not None))
        self.scaler.step(self.inner)
        self.scaler.update()
        for p, m in zip(self.params, self.master, strict=True):
            p.copy_(m)
            m.grad = None


class PrecisionTrainer(Trainer):
    """The lab's Trainer in one of ``PRECISIONS``: autocast around the forward, scaled backward for fp16."""

    def __init__(self, cfg: TrainConfig, precision: str, init_scale: float = DEFAULT_SCALE) -> None:
        require_choice("precision", precision, PRECISIONS)
        require_positive("init_scale", init_scale, integer=False)
        super().__init__(replace(cfg, precision="bf16-mixed" if precision == "bf16-mixed" else "fp32"))
        self.precision = precision
        self.scaler = torch.amp.GradScaler("cpu", init_scale=init_scale, enabled=precision == "fp16-mixed")
        if precision == "fp16-mixed":
            self.model.to(torch.float16)
            self.optimizer = ScaledMasterWeightAdamW(list(self.model.parameters()), cfg.lr, self.scaler)

    def forward_context(self) -> torch.autocast:
        return torch.autocast("cpu", dtype=torch.bfloat16, enabled=self.precision == "bf16-autocast")

    def backward(self, loss: torch.Tensor) -> None:
        self.scaler.scale(loss).backward()  # the identity unless fp16-mixed

    def eval_loss(self, batches_: int = 4) -> float:
        with self.forward_context():
            return super().eval_loss(batches_)


def precision_trainer(precision: str, model: GPTConfig | None = None, batch_size: int = 4, lr: float = 3e-3,
                      seed: int = 0, init_scale: float = DEFAULT_SCALE) -> PrecisionTrainer:
    """A seeded ``PrecisionTrainer`` on the micro model (same initial weights in every precision)."""
    cfg = TrainConfig(model=model or micro_model(), batch_size=batch_size, lr=lr, seed=seed)
    return PrecisionTrainer(cfg, precision, init_scale)


def activation_prediction(cfg: GPTConfig, batch: int, precision: str) -> dict[str, dict[str, float]]:
    """Predicted saved bytes per layer and outside the layers, term by term: ``korthikanti`` is labkit.predict.estimate
    at the run's element size; the rest is what the paper leaves out and what autocast adds (module docstring)."""
    require_choice("precision", precision, PRECISIONS)
    if cfg.mask != "bool":
        raise LabkitError(f"mask must be bool for this prediction (got {cfg.mask!r})")
    shape = ModelShape.from_config(cfg)
    s, b, h, v = cfg.seq_len, batch, cfg.d_model, cfg.vocab_size
    e = 4 if precision == "fp32" else 2
    ln = 2 if precision in ("bf16-mixed", "fp16-mixed") else 4  # LayerNorm input and statistics
    auto = precision == "bf16-autocast"
    matrices = h * (h + 2 * shape.kv_hidden) + h * h + 2 * h * shape.ffn_size
    layer = {
        "korthikanti": activation_bytes_per_layer(shape, s, b, e, 1, attention=cfg.attention),
        "LayerNorm mean and rstd": 2 * 2 * s * b * ln,
        "fp32 LayerNorm inputs (autocast)": 2 * (ln - e) * s * b * h,
        "bf16 weight copies (autocast)": 2 * matrices if auto else 0,
    }
    outside = {
        "korthikanti": activation_bytes_outside_layers(shape, s, b, e, 1),
        "LayerNorm mean and rstd": 2 * s * b * ln,
        "fp32 LayerNorm input (autocast)": (ln - e) * s * b * h,
        "bf16 embedding copy for the head (autocast)": 2 * v * h if auto else 0,
        "position ids (int64) and the loss (fp32)": 8 * s + 4,
    }
    return {"per layer": layer, "outside layers": outside}


def precision_comparison(measured: StepMemory, cfg: GPTConfig, batch: int, precision: str) -> Comparison:
    """Model states and activations of one measured step beside ZeRO's and Korthikanti's formulas."""
    params = ModelShape.from_config(cfg).params
    states = model_state_bytes(params, ESTIMATE_PRECISION[precision])
    per_layer, outside = (sum(d.values()) for d in activation_prediction(cfg, batch, precision).values())
    rows = [
        *(Record(k.replace("optimizer", "optimizer states"), getattr(measured, k), v, "bytes")
          for k, v in states.items()),
        *(Record(f"activations, layer {i}", m, per_layer, "bytes")
          for i, m in enumerate(measured.activations_per_layer())),
        Record("activations, outside layers", sum(measured.outside_layers().values()), outside, "bytes"),
    ]
    return Comparison(f"One training step, {precision} ({params:,} parameters)", tuple(rows))


@dataclass(frozen=True)
class PrecisionRun:
    """One precision's training run: its losses step by step and its final validation loss."""

    precision: str
    losses: tuple[float, ...]
    eval_loss: float
    skipped_steps: tuple[int, ...]  # fp16-mixed only: steps whose update GradScaler dropped


def precision_runs(steps: int = 60, precisions: tuple[str, ...] = PRECISIONS, model: GPTConfig | None = None,
                   batch_size: int = 4, lr: float = 3e-3, seed: int = 0) -> dict[str, PrecisionRun]:
    """Train the same seeded model in each precision for ``steps`` steps; deterministic run to run."""
    require_positive("steps", steps)
    out = {}
    for p in precisions:
        t = precision_trainer(p, model, batch_size, lr, seed)
        losses, skipped = tuple(t.run(steps)), getattr(t.optimizer, "skipped", [])
        out[p] = PrecisionRun(p, losses, t.eval_loss(), tuple(i for i, s in enumerate(skipped) if s))
    return out


def loss_curves(runs: dict[str, PrecisionRun]) -> dict[str, list[float]]:
    """{precision: losses}, ready for a line plot."""
    return {name: list(r.losses) for name, r in runs.items()}


def gaps_to_fp32(runs: dict[str, PrecisionRun]) -> dict[str, tuple[float, float]]:
    """{precision: (largest per-step loss gap, final eval-loss gap)} against fp32, in nats. A step GradScaler
    skips leaves fp16 one update behind while the loss falls fast: per-step gap 0.064 in the 60-step micro run."""
    if "fp32" not in runs:
        raise LabkitError(f"runs must include fp32 to compare against (got {', '.join(runs) or 'none'})")
    ref = runs["fp32"]
    return {name: (max(abs(a - b) for a, b in zip(r.losses, ref.losses, strict=True)), abs(r.eval_loss - ref.eval_loss))
            for name, r in runs.items()}


@dataclass(frozen=True)
class UnderflowResult:
    """fp16 gradients of one batch against the fp32 gradients of the same weights, at one loss scale."""

    scale: float
    loss_multiplier: float
    elements: int  # gradient elements that are non-zero in fp32
    flushed: int  # of those, zero in fp16: they underflowed
    overflowed: int  # inf or NaN in fp16
    norm_lost: float  # share of the fp32 gradient's norm held by the flushed elements
    below_normal: int  # of the non-zero fp32 elements (unscaled), those under fp16's smallest normal, 2^-14

    @property
    def flushed_fraction(self) -> float:  # of the gradient elements fp32 holds as non-zero
        return self.flushed / self.elements

    @property
    def below_normal_fraction(self) -> float:  # of the same elements, before any loss scale
        return self.below_normal / self.elements


def gradient_underflow(scales: tuple[float, ...] = (1.0, DEFAULT_SCALE), loss_multiplier: float = 2.0**-12,
                       model: GPTConfig | None = None, batch_size: int = 4, seed: int = 0) -> list[UnderflowResult]:
    """How many gradient elements fp16 flushes to zero, with the loss scaled by each of ``scales``.

    The micro model's loss averages b*s = 128 tokens, so its gradients are large: unscaled, fp16
    flushes only about 0.02% of them (try ``loss_multiplier=1``). A large model's gradients are
    orders of magnitude smaller (Micikevicius et al. 2018, section 3.3 and Fig. 3: many activation
    gradients of their SSD model fall below what fp16 represents). To put the micro model's gradients there,
    the loss is multiplied by ``loss_multiplier`` (2^-12) in both fp16 and the fp32 reference.
    Dropout is off (eval mode) so both see the same network; both hold the same fp16-rounded weights.
    """
    for field, v in (("loss_multiplier", loss_multiplier), *(("scale", s) for s in scales)):
        require_positive(field, v, integer=False)
    t = precision_trainer("fp32", model, batch_size, seed=seed)
    x, y = t.data(0)
    half = copy.deepcopy(t.model).half().eval()
    ref = copy.deepcopy(half).double().eval()  # the reference in fp64, rounded to fp32: the same on every CPU
    (ref(x, y)[1] * loss_multiplier).backward()
    g32 = torch.cat([p.grad.flatten() for p in ref.parameters()]).float()
    live = g32 != 0
    below = int((live & (g32.abs() < torch.finfo(torch.float16).tiny)).sum())  # the reference, so any CPU's count
    out = []
    for scale in scales:
        half.zero_grad(set_to_none=True)
        (half(x, y)[1] * (loss_multiplier * scale)).backward()
        g16 = torch.cat([p.grad.flatten() for p in half.parameters()])
        flushed = live & (g16 == 0)
        out.append(UnderflowResult(scale, loss_multiplier, int(live.sum()), int(flushed.sum()),
                                   int((~torch.isfinite(g16)).sum()), float(g32[flushed].norm() / g32.norm()),
                                   below))
    return out


def share_text(fraction: float) -> str:
    """A share as people round it, to a precision the CPU's fp16 kernels do not reach: whole per cent from 1% to
    99%, else "under 1%" or "over 99%" (a share short of all never prints as 100%). Below 1% the share is a
    handful of elements (0.01% of the micro model's gradient is about ten), and which of them flush depends on the
    last bits of an fp16 backward, which differ between CPUs."""
    pct = 100 * fraction
    if fraction < 1 and pct > 99:
        return "over 99%"
    return f"{pct:.0f}%" if pct >= 1 else "under 1%"


@dataclass(frozen=True)
class OverflowTrace:
    """fp16 training started with too large a loss scale: GradScaler skips, halves, then trains."""

    init_scale: float
    scales: tuple[float, ...]  # the scale each step ran with
    skipped_steps: tuple[int, ...]  # steps whose gradients held inf/NaN: no update
    losses: tuple[float, ...]

    @property
    def first_update(self) -> int:  # the first step whose update was applied (len(scales) if none was)
        return next((i for i in range(len(self.scales)) if i not in self.skipped_steps), len(self.scales))


def overflow_recovery(steps: int = 30, init_scale: float = 2.0**24, model: GPTConfig | None = None,
                      batch_size: int = 4, seed: int = 0) -> OverflowTrace:
    """Start fp16 training with too large a loss scale and watch GradScaler fix it. The gradient reaching
    the fp16 logits is scale * (softmax - one-hot) / (b*s tokens): with 2^24 and 128 tokens it is up to
    131072, past fp16's largest value 65504, so it is inf."""
    t = precision_trainer("fp16-mixed", model, batch_size, seed=seed, init_scale=init_scale)
    losses, opt = tuple(t.run(steps)), t.optimizer
    return OverflowTrace(init_scale, tuple(opt.scales), tuple(i for i, s in enumerate(opt.skipped) if s), losses)


@dataclass(frozen=True)
class FormatRange:
    """What a floating-point format can hold, from ``torch.finfo``."""

    dtype: str
    bits: int
    max: float
    smallest_normal: float
    smallest_subnormal: float  # smallest_normal * eps: below half of it, values flush to zero
    eps: float  # gap between 1 and the next number: the relative precision
    decades: float  # orders of magnitude from the smallest subnormal to the largest value


def dynamic_range(dtypes: tuple[str, ...] = ("float32", "bfloat16", "float16")) -> list[FormatRange]:
    """fp32, bf16 and fp16 side by side: bf16 has fp32's exponent range, so it needs no loss scaling."""
    out = []
    for name in dtypes:
        require_choice("dtype", name, ("float32", "bfloat16", "float16"))
        f = torch.finfo(getattr(torch, name))
        sub = f.tiny * f.eps
        out.append(FormatRange(name, f.bits, f.max, f.tiny, sub, f.eps, math.log10(f.max / sub)))
    return out
