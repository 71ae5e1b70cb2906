"""One training loop for every topic: seeded, step-indexed, with a hook around each step.

Determinism is a feature of the lab: with a fixed seed, a fixed thread count and
batches that are a function of the step, the same run prints the same losses on
every machine, so notebooks can be validated against stored outputs.

Precision follows the ZeRO paper's accounting (Rajbhandari et al., SC 2020):

* ``fp32``: fp32 weights and gradients, AdamW's two fp32 moments (4 + 4 + 8 bytes
  per parameter);
* ``bf16-mixed``: bf16 weights and gradients on the model, and an optimizer that
  keeps fp32 master weights and both moments (2 + 2 + 12 = 16 bytes per parameter),
  as in Micikevicius et al. (ICLR 2018) with bf16 instead of fp16.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field

import torch
import torch.nn as nn

from labkit.data import Batches, batches, vocab_size
from labkit.errors import require_choice, require_positive
from labkit.model import GPTConfig, TinyGPT

TRAIN_PRECISIONS = ("fp32", "bf16-mixed")
DEFAULT_THREADS = 2


def seed_everything(seed: int = 0, threads: int = DEFAULT_THREADS) -> None:
    """Seed torch and fix the thread count: 1 and 2 threads give different bits."""
    torch.manual_seed(seed)
    torch.set_num_threads(threads)


class MasterWeightAdamW:
    """AdamW on fp32 master copies of 16-bit model weights (mixed-precision training).

    The model holds 16-bit weights and gradients; this optimizer holds the fp32
    master weights and AdamW's fp32 moments: K = 12 bytes per parameter. The fp32
    gradient it steps with exists only inside ``step`` (a temporary).
    """

    def __init__(self, params: list[nn.Parameter], lr: float, weight_decay: float = 0.0) -> None:
        self.params = params
        self.master = [p.detach().float().clone().requires_grad_(True) for p in params]
        self.inner = torch.optim.AdamW(self.master, lr=lr, weight_decay=weight_decay, foreach=False)

    @property
    def state(self):  # the per-parameter state, like torch.optim.Optimizer.state
        return self.inner.state

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params:
            if set_to_none:
                p.grad = None
            elif p.grad is not None:
                p.grad.zero_()

    @torch.no_grad()
    def step(self) -> None:
        for p, m in zip(self.params, self.master, strict=True):
            m.grad = None if p.grad is None else p.grad.float()
        self.inner.step()
        for p, m in zip(self.params, self.master, strict=True):
            p.copy_(m)
            m.grad = None

    def state_tensors(self) -> list[torch.Tensor]:
        """Master weights and moments: what the optimizer keeps between steps."""
        return self.master + [t for s in self.inner.state.values() for t in s.values() if t.dim()]


@dataclass(frozen=True)
class TrainConfig:
    """What to train and how; the model's vocabulary defaults to the corpus's."""

    model: GPTConfig = field(default_factory=lambda: GPTConfig(vocab_size=vocab_size()))
    batch_size: int = 16
    lr: float = 3e-3
    precision: str = "fp32"
    seed: int = 0
    threads: int = DEFAULT_THREADS

    def __post_init__(self) -> None:
        require_positive("batch_size", self.batch_size)
        require_positive("lr", self.lr, integer=False)
        require_positive("threads", self.threads)
        require_choice("precision", self.precision, TRAIN_PRECISIONS)


class Trainer:
    """A tiny GPT, its optimizer and its data; ``step(i)`` trains on batch ``i``."""

    def __init__(self, cfg: TrainConfig) -> None:
        self.cfg = cfg
        seed_everything(cfg.seed, cfg.threads)
        self.model = TinyGPT(cfg.model)
        self.data: Batches = batches(cfg.batch_size, cfg.model.seq_len, seed=cfg.seed)
        params = list(self.model.parameters())
        if cfg.precision == "fp32":
            self.optimizer = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=0.0, foreach=False)
        else:
            self.model.to(torch.bfloat16)
            self.optimizer = MasterWeightAdamW(params, lr=cfg.lr)
        self.steps_done = 0

    def forward_context(self) -> AbstractContextManager:
        """What the forward pass runs inside (nothing here; autocast in ``reduction.precision``)."""
        return nullcontext()

    def backward(self, loss: torch.Tensor) -> None:
        """Backward from ``loss`` (a scaled loss in fp16 training overrides this)."""
        loss.backward()

    def forward_backward(self, step: int) -> torch.Tensor:
        """Loss of batch ``step``, with gradients accumulated into ``.grad``."""
        x, y = self.data(step)
        with self.forward_context():
            _, loss = self.model(x, y)
        self.backward(loss)
        return loss

    def step(self, step: int | None = None) -> float:
        """One full training step on batch ``step`` (default: the next one)."""
        i = self.steps_done if step is None else step
        self.model.train()
        loss = self.forward_backward(i)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.steps_done = i + 1
        return loss.item()

    def run(self, steps: int, progress: bool = False, desc: str = "training") -> list[float]:
        """Train ``steps`` steps and return their losses; ``progress`` shows a tqdm bar."""
        require_positive("steps", steps)
        it: Iterator[int] = iter(range(steps))
        if progress:
            from tqdm.auto import tqdm

            it = iter(tqdm(range(steps), desc=desc, leave=False))
        return [self.step() for _ in it]

    @torch.no_grad()
    def eval_loss(self, batches_: int = 4) -> float:
        """Mean validation loss over a few fixed batches (dropout off)."""
        self.model.eval()
        val = batches(self.cfg.batch_size, self.cfg.model.seq_len, seed=self.cfg.seed, split="val")
        losses = [float(self.model(*val(i))[1]) for i in range(batches_)]
        self.model.train()
        return sum(losses) / len(losses)


def parameters_equal(a: nn.Module, b: nn.Module) -> bool:
    """True when two models hold bit-identical parameters: the test that a memory technique changed no number."""
    pa, pb = list(a.parameters()), list(b.parameters())
    return len(pa) == len(pb) and all(x.shape == y.shape and torch.equal(x, y) for x, y in zip(pa, pb, strict=True))
