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

import os
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field

import torch
import torch.nn as nn

from labkit.errors import LabkitError, require_choice, require_positive
from labkit.rig.data import Batches, batches, vocab_size
from labkit.rig.model import GPTConfig, TinyGPT
from labkit.rig.step import Batch, forward_backward, training_step

TRAIN_PRECISIONS = ("fp32", "bf16-mixed", "fp64")
# fp64 is for studies whose printed figures come from trained floats (a compression ratio, a gradient error):
# a CPU with other kernels or another thread count moves fp32 results in the 7th digit and a few training steps
# carry that into the 3rd; in fp64 the same drift stays below 1e-10, so the printed figures are the same on
# every machine. Memory measurements stay in fp32 and bf16, the precisions the lab teaches.
STUDY_DTYPES = {"fp32": torch.float32, "fp64": torch.float64}  # the dtype a study's own modules run in


def study_dtype(name: str) -> torch.dtype:
    """The torch dtype of a study run in ``name`` ("fp32" or "fp64", the note above): the one place a study that
    builds its own modules (PipeDream's stages) turns the name into a dtype, as ``TrainConfig.precision`` does."""
    return STUDY_DTYPES[require_choice("dtype", name, STUDY_DTYPES)]


MODEL_PRECISIONS = ("fp32", "bf16-autocast", "bf16-mixed")  # a user's own model (``Trainer(model=...)``)
LossFn = Callable[[nn.Module, Batch], torch.Tensor]


def _lab_threads() -> int:
    """The lab's fixed intra-op thread count: 2, or ``LABKIT_THREADS``.

    Every checked output must be the same at any thread count (the portability tier runs the notebooks
    with ``LABKIT_THREADS=1``); a course server that must leave cores free sets it too.
    """
    value = os.environ.get("LABKIT_THREADS", "2")
    if not value.isdigit() or int(value) < 1:
        raise LabkitError(f"LABKIT_THREADS must be a positive integer (1, 2, ...), got {value!r}")
    return int(value)


DEFAULT_THREADS = _lab_threads()


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


def batch_tensors(batch: Batch) -> list[torch.Tensor]:
    """The tensors of a batch, whatever its form: what a measurement leaves out of the activations."""
    if torch.is_tensor(batch):
        return [batch]
    values = batch.values() if isinstance(batch, Mapping) else batch if isinstance(batch, (tuple, list)) else ()
    return [t for t in values if torch.is_tensor(t)]


def default_loss(model: nn.Module, batch: Batch) -> torch.Tensor:
    """The loss a model returns itself: ``model(**batch).loss`` (transformers), ``model(x, y)[1]`` (TinyGPT).

    A dict batch is passed as keyword arguments, a tuple as positional ones. The output's ``loss``
    attribute or key is used, else the last 0-dim tensor of a tuple, else a 0-dim output itself.
    """
    out = model(**batch) if isinstance(batch, Mapping) else model(*batch) if isinstance(batch, (tuple, list)) \
        else model(batch)
    loss = getattr(out, "loss", None)
    if loss is None and isinstance(out, Mapping):
        loss = out.get("loss")
    if loss is None and isinstance(out, (tuple, list)):
        loss = next((t for t in reversed(out) if torch.is_tensor(t) and t.dim() == 0), None)
    if loss is None and torch.is_tensor(out) and out.dim() == 0:
        loss = out
    if loss is None:
        raise LabkitError("loss: the model returned no loss (no .loss, no 0-dim tensor): pass loss=fn(model, batch)")
    return loss


def blocks_of(trainer) -> str:
    """The qualified name of a trainer's list of layers ("h" for the tiny GPT and trainer-like objects)."""
    blocks = getattr(trainer, "blocks", "h")
    return blocks if isinstance(blocks, str) else "h"


class Trainer:
    """A model, its optimizer and its data; ``step(i)`` trains on batch ``i``.

    ``Trainer(cfg)`` builds the lab's tiny GPT. ``Trainer(model=m, data=batch)`` trains a user's
    own ``nn.Module`` the same way: ``data`` is one batch or a function of the step, ``loss`` a
    function ``(model, batch) -> loss`` (default: the loss the model returns, as transformers'
    models do with ``labels``), ``precision`` one of ``MODEL_PRECISIONS`` and ``blocks`` the
    qualified name of the ``nn.ModuleList`` of repeated layers (default: found by
    ``labkit.rig.blocks.find_blocks``). A given ``optimizer`` is kept (fp32 and bf16-autocast only);
    the default is the lab's AdamW (fp32 moments, fp32 master weights in bf16-mixed). In bf16-mixed
    the model is cast to bf16 and the batch is used as given (floating inputs must be bf16 then).
    """

    def __init__(self, cfg: TrainConfig | None = None, *, model: nn.Module | None = None,
                 data: Batch | Callable[[int], Batch] | None = None, optimizer: torch.optim.Optimizer | None = None,
                 loss: LossFn | None = None, precision: str | None = None, blocks: str | None = None,
                 lr: float = 3e-3, seed: int = 0, threads: int = DEFAULT_THREADS) -> None:
        self.steps_done = 0
        self.loss_fn = loss
        if model is None:
            cfg = cfg or TrainConfig()
            self.cfg = cfg
            seed_everything(cfg.seed, cfg.threads)
            self.model = TinyGPT(cfg.model)
            self.data: Batches | Callable[[int], Batch] = batches(cfg.batch_size, cfg.model.seq_len, seed=cfg.seed)
            self.precision, self.blocks = cfg.precision, "h"
            params = list(self.model.parameters())
            if cfg.precision == "fp64":
                self.model.to(torch.float64)
            if cfg.precision in ("fp32", "fp64"):
                self.optimizer = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=0.0, foreach=False)
            else:
                self.model.to(torch.bfloat16)
                self.optimizer = MasterWeightAdamW(params, lr=cfg.lr)
            return
        self._init_user_model(cfg, model, data, optimizer, precision, blocks, lr, seed, threads)

    def _init_user_model(self, cfg, model, data, optimizer, precision, blocks, lr, seed, threads) -> None:
        from labkit.rig.blocks import find_blocks

        if not isinstance(model, nn.Module):
            raise LabkitError(f"model must be a torch.nn.Module (got {type(model).__name__})")
        if data is None:
            raise LabkitError("data must be given with model: one batch, or a function step -> batch")
        precision = precision or (cfg.precision if cfg else "fp32")
        require_choice("precision", precision, MODEL_PRECISIONS)
        self.cfg, self.model, self.precision = cfg, model, precision
        seed_everything(cfg.seed if cfg else seed, cfg.threads if cfg else threads)
        self.data = data if callable(data) and not isinstance(data, nn.Module) else (lambda step: data)
        self.blocks = find_blocks(model) if blocks is None else find_blocks(model, blocks)
        params = [p for p in model.parameters() if p.requires_grad]
        lr = cfg.lr if cfg else lr
        if precision == "bf16-mixed":
            if optimizer is not None:
                raise LabkitError("optimizer: bf16-mixed uses the lab's MasterWeightAdamW (fp32 master weights); "
                                  "pass optimizer=None, or precision fp32 or bf16-autocast")
            model.to(torch.bfloat16)
            self.optimizer = MasterWeightAdamW(params, lr=lr)
        else:
            self.optimizer = optimizer or torch.optim.AdamW(params, lr=lr, weight_decay=0.0, foreach=False)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def forward_context(self) -> AbstractContextManager:
        """What the forward pass runs inside: autocast for a user model in bf16-autocast, else nothing
        (``reduction.precision`` overrides it for the tiny GPT)."""
        if getattr(self, "precision", None) == "bf16-autocast":
            return torch.autocast(self.device.type, dtype=torch.bfloat16)
        return nullcontext()

    def compute_loss(self, batch: Batch) -> torch.Tensor:
        """The loss of one batch: the tiny GPT's ``model(x, y)[1]``, or the user's loss function."""
        if self.loss_fn is not None:
            return self.loss_fn(self.model, batch)
        if isinstance(self.model, TinyGPT):
            return self.model(*batch)[1]
        return default_loss(self.model, batch)

    def backward(self, loss: torch.Tensor) -> None:
        """Backward from ``loss`` (a scaled loss in fp16 training overrides this)."""
        loss.backward()

    def forward_backward(self, step: int) -> torch.Tensor:
        """Loss of batch ``step``, with gradients accumulated into ``.grad`` (``labkit.rig.step``)."""
        return forward_backward(self, step)

    def step(self, step: int | None = None) -> float:
        """One full training step on batch ``step`` (default: the next one): ``labkit.rig.step.training_step``."""
        return training_step(self, step)

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
        if not isinstance(self.model, TinyGPT) or self.cfg is None:
            raise LabkitError("eval_loss uses the corpus's validation split: the tiny GPT only (got a user model)")
        self.model.eval()
        val = batches(self.cfg.batch_size, self.cfg.model.seq_len, seed=self.cfg.seed, split="val")
        losses = [float(self.model(*val(i))[1]) for i in range(batches_)]
        self.model.train()
        return sum(losses) / len(losses)


def parameters_equal(a: nn.Module, b: nn.Module) -> bool:
    """True when two models hold bit-identical parameters: the test that a memory technique changed no number."""
    pa, pb = list(a.parameters()), list(b.parameters())
    return len(pa) == len(pb) and all(x.shape == y.shape and torch.equal(x, y) for x, y in zip(pa, pb, strict=True))
