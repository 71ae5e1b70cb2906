"""8-bit AdamW: both moments stored block-wise as uint8 codes + fp32 absmax, updated in fp32.

Dettmers et al., "8-bit Optimizers via Block-wise Quantization" (ICLR 2022): each step
dequantizes m and v to fp32, applies the usual AdamW update (Loshchilov & Hutter, ICLR
2019) and quantizes them back, so between steps the optimizer keeps 2 bytes per
parameter plus 4 bytes per block of 2048 for each moment, instead of 8 (two fp32
moments). m uses the signed dynamic map, v the unsigned one. This is a hand-written
re-implementation in plain torch (no CUDA kernels, no bitsandbytes), small enough to read.
Unlike bitsandbytes it quantizes every tensor, however small, so the byte count stays
one formula: :func:`state_bytes`.

:func:`compare_optimizers` trains the lab's tiny GPT (``labkit.rig.train.Trainer``, fp32
weights) with torch's AdamW and with this optimizer swapped in as ``trainer.optimizer``,
and reports losses and measured state bytes side by side. With the *linear* map, v
underflows to 0 in most of each block and ``m / (sqrt(v) + eps)`` explodes: the reason
for the dynamic map, made visible.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import torch
import torch.nn as nn

from labkit.errors import require_choice, require_positive
from labkit.reduction.quantize import BLOCK, MAPS, SCALE_BYTES, Quantized, code_book, dequantize, quantize
from labkit.rig.data import vocab_size
from labkit.rig.model import GPTConfig
from labkit.rig.train import TrainConfig, Trainer

STATE_BITS = (8, 32)


def state_bytes(n_params: int, bits: int = 8, block: int = BLOCK) -> int:
    """Exact bytes of Adam's two moments for one tensor of ``n_params`` values.

    32 bits: 2 * 4 * n. 8 bits: 2 * (n codes + 4 bytes of absmax per started block of
    ``block``), i.e. 2 + 8/block bytes per parameter (Dettmers et al. 2022).
    """
    require_positive("n_params", n_params)
    require_choice("bits", bits, STATE_BITS)
    require_positive("block", block)
    if bits == 32:
        return 8 * n_params
    return 2 * (n_params + SCALE_BYTES * -(-n_params // block))


def model_state_bytes(sizes: Sequence[int], bits: int = 8, block: int = BLOCK) -> int:
    """:func:`state_bytes` summed over a model's tensors: blocks never span two tensors."""
    return sum(state_bytes(n, bits, block) for n in sizes)


def measured_state_bytes(optimizer: torch.optim.Optimizer) -> int:
    """Bytes of the tensors an optimizer keeps between steps (0-d step counters left out)."""
    return sum(t.numel() * t.element_size() for s in optimizer.state.values() for t in s.values()
               if isinstance(t, torch.Tensor) and t.dim())


class AdamW8bit(torch.optim.Optimizer):
    """AdamW whose moments live as block-wise 8-bit codes (``map``: ``dynamic`` or the ``linear`` baseline).

    The update is torch's single-tensor AdamW, operation for operation, so the first
    step (before any quantized state is read) matches ``torch.optim.AdamW`` exactly.
    """

    def __init__(self, params: Iterable[nn.Parameter], lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.0, block: int = BLOCK, map: str = "dynamic") -> None:
        require_positive("lr", lr, integer=False)
        require_positive("block", block)
        require_choice("map", map, MAPS)
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))
        self.block, self.map = block, map
        self.books = {"m": code_book(map, signed=True), "v": code_book(map, signed=False)}

    def _load(self, st: dict, key: str, p: torch.Tensor) -> torch.Tensor:
        if f"{key}_codes" not in st:
            return torch.zeros_like(p, dtype=torch.float32)
        q = Quantized(st[f"{key}_codes"], st[f"{key}_absmax"], tuple(p.shape), self.block)
        return dequantize(q, self.books[key])

    def _store(self, st: dict, key: str, x: torch.Tensor) -> None:
        q = quantize(x, self.books[key], self.block)
        st[f"{key}_codes"], st[f"{key}_absmax"] = q.codes, q.absmax

    @torch.no_grad()
    def step(self, closure=None):  # torch.optim.Optimizer signature
        loss = None if closure is None else closure()
        for group in self.param_groups:
            lr, (beta1, beta2), eps, wd = group["lr"], group["betas"], group["eps"], group["weight_decay"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                st = self.state[p]
                st["step"] = st.get("step", 0) + 1
                grad = p.grad.float()
                m, v = self._load(st, "m", p), self._load(st, "v", p)
                p.mul_(1 - lr * wd)
                m.lerp_(grad, 1 - beta1)
                v.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
                step_size = lr / (1 - beta1 ** st["step"])
                denom = (v.sqrt() / (1 - beta2 ** st["step"]) ** 0.5).add_(eps)
                p.addcdiv_(m, denom, value=-step_size)
                self._store(st, "m", m)
                self._store(st, "v", v)
        return loss


def micro_train_config(seed: int = 0, lr: float = 3e-3) -> TrainConfig:
    """The micro run notebook 05 trains for quantization: 2 layers, d=64, s=32, b=8 (tests use a smaller one)."""
    model = GPTConfig(vocab_size=vocab_size(), seq_len=32, n_layer=2, n_head=4, d_model=64)
    return TrainConfig(model=model, batch_size=8, lr=lr, seed=seed)


@dataclass(frozen=True)
class OptimizerRun:
    """One training run: its losses, final validation loss and measured vs predicted state bytes."""

    name: str
    losses: tuple[float, ...]
    eval_loss: float
    n_params: int
    state_bytes: int  # measured from the optimizer's state tensors
    predicted_bytes: int  # model_state_bytes(...)

    @property
    def bytes_per_param(self) -> float:
        return self.state_bytes / self.n_params

    @property
    def final_loss(self) -> float:
        """Mean of the last 10 training losses (less noisy than the last one)."""
        tail = self.losses[-10:]
        return sum(tail) / len(tail)


@dataclass(frozen=True)
class OptimizerComparison:
    steps: int
    runs: tuple[OptimizerRun, ...]

    def run(self, name: str) -> OptimizerRun:
        require_choice("name", name, [r.name for r in self.runs])
        return next(r for r in self.runs if r.name == name)

    def rows(self) -> list[dict[str, object]]:
        """One row per run, for a notebook table."""
        return [{"optimizer": r.name, "state bytes": r.state_bytes, "predicted": r.predicted_bytes,
                 "bytes/param": round(r.bytes_per_param, 4), "final train loss": round(r.final_loss, 4),
                 "eval loss": round(r.eval_loss, 4)} for r in self.runs]

    def loss_table(self, every: int = 10) -> list[dict[str, object]]:
        """Losses side by side every ``every`` steps."""
        require_positive("every", every)
        return [{"step": i, **{r.name: round(r.losses[i], 4) for r in self.runs}}
                for i in range(0, self.steps, every)]


def train_with(cfg: TrainConfig, steps: int, optimizer: str = "fp32",
               block: int = BLOCK) -> tuple[Trainer, OptimizerRun]:
    """Train ``steps`` steps with torch AdamW (``fp32``) or :class:`AdamW8bit` (``dynamic``/``linear``).

    A run whose loss turns non-finite stops there (its weights are NaN from then on, so the rest
    would only spend time): ``losses`` then ends with that step's loss.
    """
    require_choice("optimizer", optimizer, ("fp32", *MAPS))
    require_positive("steps", steps)
    trainer = Trainer(cfg)
    params = list(trainer.model.parameters())
    if optimizer != "fp32":
        trainer.optimizer = AdamW8bit(params, lr=cfg.lr, weight_decay=0.0, block=block, map=optimizer)
    losses = []
    for _ in range(steps):
        losses.append(trainer.step())
        if not math.isfinite(losses[-1]):
            break
    sizes = [p.numel() for p in params]
    bits = 32 if optimizer == "fp32" else 8
    name = "fp32 AdamW" if optimizer == "fp32" else f"8-bit AdamW ({optimizer})"
    run = OptimizerRun(name, tuple(losses), trainer.eval_loss(), sum(sizes), measured_state_bytes(trainer.optimizer),
                       model_state_bytes(sizes, bits, block))
    return trainer, run


def compare_optimizers(cfg: TrainConfig | None = None, steps: int = 150, maps: Sequence[str] = MAPS,
                       block: int = BLOCK) -> OptimizerComparison:
    """fp32 AdamW beside 8-bit AdamW with each map in ``maps``: same seed, same data, same steps."""
    cfg = cfg or micro_train_config()
    runs = [train_with(cfg, steps, "fp32", block)[1]]
    runs += [train_with(cfg, steps, m, block)[1] for m in maps]
    return OptimizerComparison(steps, tuple(runs))


@dataclass(frozen=True)
class MomentRoundTrip:
    """How one map treats one of Adam's real moments: underflow to 0 and typical relative error."""

    map: str
    moment: str  # "m" (exp_avg, signed map) or "v" (exp_avg_sq, unsigned map)
    n_nonzero: int
    zero_fraction: float  # nonzero entries that come back as exactly 0
    median_rel_error: float  # median of |x - x_hat| / |x| over nonzero entries


def moment_round_trip(optimizer: torch.optim.Optimizer, block: int = BLOCK) -> list[MomentRoundTrip]:
    """Quantize a trained ``torch.optim.AdamW``'s fp32 moments with each map: why v needs the dynamic map."""
    out = []
    for moment, key, signed in (("m", "exp_avg", True), ("v", "exp_avg_sq", False)):
        for kind in MAPS:
            book = code_book(kind, signed=signed)
            xs, ys = [], []
            for st in optimizer.state.values():
                x = st[key].detach().float()
                xs.append(x.reshape(-1))
                ys.append(dequantize(quantize(x, book, block), book).reshape(-1))
            x, y = torch.cat(xs), torch.cat(ys)
            nz = x != 0
            rel = ((x - y).abs() / x.abs())[nz]
            out.append(MomentRoundTrip(kind, moment, int(nz.sum()), float((y[nz] == 0).float().mean()),
                                       float(rel.median())))
    return out


def explosive_fraction(optimizer: torch.optim.Optimizer, map: str, block: int = BLOCK) -> float:
    """Fraction of a torch AdamW's entries whose quantized v is 0 while quantized m is not.

    There the update is m / eps (eps = 1e-8): a step 10^8 times too large. Measured on
    the moments after the first steps, when g^2 spans the most orders of magnitude.
    """
    require_choice("map", map, MAPS)
    m_book, v_book = code_book(map, signed=True), code_book(map, signed=False)
    bad = total = 0
    for st in optimizer.state.values():
        m = dequantize(quantize(st["exp_avg"], m_book, block), m_book)
        v = dequantize(quantize(st["exp_avg_sq"], v_book, block), v_book)
        bad += int(((m != 0) & (v == 0)).sum())
        total += m.numel()
    return bad / total
