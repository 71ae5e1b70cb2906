"""Activation recompute with ``torch.utils.checkpoint``: which layers keep their activations.

Recompute trades compute for memory: a checkpointed region keeps only its input for
backward and runs its forward a second time when backward reaches it. The plans:

* ``none``: every layer keeps everything (Korthikanti et al. 2022: 34sbh + 5as^2b per layer at 16 bits);
* ``full``: every block is its own checkpointed region and keeps its input, e*sbh (2sbh at 16 bits);
* ``every-k``: blocks 0, k, 2k, ... are checkpointed, the others keep everything;
* ``sqrt-all``: after Chen et al., "Training Deep Nets with Sublinear Memory Cost", 2016: segments of
  round(sqrt(n)) blocks, *all* checkpointed (``design``'s ``sqrt`` keeps the last one whole), so only
  segment boundaries are kept and backward re-materialises one segment at a time;
* ``selective``: Korthikanti et al. 2022, section 5: only the attention core ``attn.core``
  (Q K^T, softmax, dropout, times V) is checkpointed, which removes the 5as^2b term.

``labkit/model.py`` is not edited. A checkpointed module keeps its name, parameters and children:
only its class is swapped for a subclass whose forward calls ``checkpoint(..., use_reentrant=False)``,
and the layer list ``h`` walks segment heads, each running its whole segment. Names stay
``h.3.attn.core.softmax``, so the recorder attributes bytes exactly as without recompute.
"""

from __future__ import annotations

import functools
import math
import statistics
import time
from dataclasses import dataclass, replace

import torch
import torch.nn as nn
from torch.utils.checkpoint import checkpoint
from torch.utils.flop_counter import FlopCounterMode

from labkit.errors import LabkitError, require_choice, require_positive
from labkit.measure import SavedTensorRecorder, phase_memory
from labkit.predict.estimate import activation_bytes_per_layer, training_flops
from labkit.predict.tables import text_table
from labkit.rig.model import GPTConfig, TinyGPT
from labkit.rig.train import TrainConfig, Trainer
from labkit.shapes import ModelShape

MODES = ("none", "full", "every-k", "sqrt-all", "selective")
_PLAIN = "_labkit_plain_class"


@dataclass(frozen=True)
class RecomputePlan:
    """Checkpointed segments of blocks, half-open ``(start, stop)``; the other blocks keep everything."""

    name: str
    n_layer: int
    segments: tuple[tuple[int, int], ...] = ()
    selective: bool = False  # checkpoint attn.core in every block instead of whole blocks

    def __post_init__(self) -> None:
        require_positive("n_layer", self.n_layer)
        last = 0
        for start, stop in self.segments:
            if not last <= start < stop <= self.n_layer:
                raise LabkitError(f"segments must be sorted, disjoint (start, stop) ranges within 0..{self.n_layer} "
                                  f"(got {self.segments})")
            last = stop
        if self.selective and self.segments:
            raise LabkitError("a selective plan checkpoints attn.core only: it takes no block segments")

    @property
    def checkpointed(self) -> tuple[int, ...]:
        """Blocks whose forward runs twice."""
        return tuple(i for a, b in self.segments for i in range(a, b))


def uniform_plan(mode: str, n_layer: int, k: int | None = None) -> RecomputePlan:
    """The plan a mode names; ``k`` is the stride of ``every-k`` (ignored otherwise)."""
    require_choice("mode", mode, MODES)
    require_positive("n_layer", n_layer)
    if mode == "none":
        return RecomputePlan("none", n_layer)
    if mode == "selective":
        return RecomputePlan("selective", n_layer, selective=True)
    if mode == "full":
        return RecomputePlan("full", n_layer, tuple((i, i + 1) for i in range(n_layer)))
    if mode == "every-k":
        if k is None:
            raise LabkitError("mode every-k needs k, a positive integer stride (got None)")
        require_positive("k", k)
        return RecomputePlan(f"every-{k}", n_layer, tuple((i, i + 1) for i in range(0, n_layer, k)))
    size = max(1, round(math.sqrt(n_layer)))  # Chen et al.: n/k boundaries + k layers, least at k = sqrt(n)
    return RecomputePlan("sqrt-all", n_layer, tuple((i, min(i + size, n_layer)) for i in range(0, n_layer, size)))


class _Checkpointed:
    """Mixin: the module's forward (and its segment's followers) runs under non-reentrant checkpoint."""

    _labkit_followers: tuple[nn.Module, ...] = ()
    _labkit_early_stop: bool = True

    def _labkit_run(self, *args):
        out = super().forward(*args)
        for follower in self._labkit_followers:
            out = follower(out)
        return out

    def forward(self, *args):
        return checkpoint(self._labkit_run, *args, use_reentrant=False, early_stop=self._labkit_early_stop)


class _SegmentedLayers:
    """Mixin for the layer list: iterating it yields segment heads only (each runs its segment)."""

    _labkit_skip: frozenset[int] = frozenset()

    def __iter__(self):
        return (m for i, m in enumerate(self._modules.values()) if i not in self._labkit_skip)


@functools.cache
def _subclass(mixin: type, plain: type) -> type:
    return type(f"{mixin.__name__.strip('_')}{plain.__name__}", (mixin, plain), {})


def _swap(module: nn.Module, mixin: type) -> None:
    plain = getattr(module, _PLAIN, type(module))
    module.__class__ = _subclass(mixin, plain)
    object.__setattr__(module, _PLAIN, plain)


def remove_recompute(model: TinyGPT) -> None:
    """Undo :func:`apply_recompute`: every module gets its own class back."""
    for m in model.modules():
        plain = m.__dict__.pop(_PLAIN, None)
        if plain is not None:
            m.__class__ = plain
            for attr in ("_labkit_followers", "_labkit_early_stop", "_labkit_skip"):
                m.__dict__.pop(attr, None)


def apply_recompute(model: TinyGPT, plan: RecomputePlan | str, k: int | None = None,
                    early_stop: bool = True) -> RecomputePlan:
    """Checkpoint ``model`` in place by ``plan`` (a :class:`RecomputePlan` or a mode name) and return the plan.

    ``early_stop`` is torch's: recomputation stops once every tensor backward needs is back.
    The attention core's last product (dropout output times V) saves its inputs, not its
    output, so with early stop selective recompute repeats Q K^T but not that product.
    """
    if not isinstance(model, TinyGPT):
        raise LabkitError(f"model must be a labkit TinyGPT (got {type(model).__name__})")
    if isinstance(plan, str):
        plan = uniform_plan(plan, model.cfg.n_layer, k)
    if plan.n_layer != model.cfg.n_layer:
        raise LabkitError(f"plan is for n_layer={plan.n_layer}, the model has n_layer={model.cfg.n_layer}")
    remove_recompute(model)
    blocks = list(model.h._modules.values())
    if plan.selective:
        for block in blocks:
            _swap(block.attn.core, _Checkpointed)
            block.attn.core._labkit_early_stop = early_stop
        return plan
    skip: set[int] = set()
    for start, stop in plan.segments:
        head = blocks[start]
        _swap(head, _Checkpointed)
        head._labkit_followers = tuple(blocks[start + 1:stop])
        head._labkit_early_stop = early_stop
        skip.update(range(start + 1, stop))
    if skip:
        _swap(model.h, _SegmentedLayers)
        model.h._labkit_skip = frozenset(skip)
    return plan


@dataclass(frozen=True)
class RecomputeRow:
    """One plan measured on a real step beside the analytic model (bytes, FLOPs, seconds)."""

    mode: str
    measured_bytes: int  # saved activations of the layers (the recorder's count)
    predicted_bytes: int  # Korthikanti et al.'s terms by layer status, plus LayerNorm statistics
    per_layer: tuple[int, ...]
    outside_bytes: int  # embedding and head activations, the same in every plan
    flops: int  # forward + backward, counted by FlopCounterMode
    extra_flops: int  # beside the same step without recompute
    predicted_extra_flops: int
    grads_identical: bool
    loss: float
    step_seconds: float  # wall clock of forward + backward: shown, never asserted

    @property
    def error_percent(self) -> float:
        return 100.0 * (self.predicted_bytes - self.measured_bytes) / self.measured_bytes


def predicted_layer_bytes(cfg: GPTConfig, batch: int, plan: RecomputePlan, act_bytes: int = 4) -> tuple[int, ...]:
    """Bytes each layer keeps under ``plan``: ``estimate.activation_bytes_per_layer`` per layer status.

    A stored layer keeps Korthikanti et al.'s terms ("none"; "selective" in a selective plan)
    plus what the paper rounds away: each of the two LayerNorms also saves its mean and
    reciprocal standard deviation, s*b values each. A segment head keeps its input, e*sbh
    ("full"). The other blocks of a segment keep nothing: their input is recomputed.
    """
    shape, s, b = ModelShape.from_config(cfg), cfg.seq_len, batch
    mask = 1 if cfg.mask == "bool" else act_bytes

    def per_layer(recompute: str) -> int:
        exact = activation_bytes_per_layer(shape, s, b, act_bytes, mask, recompute=recompute, attention=cfg.attention)
        return int(exact) + (0 if recompute == "full" else 2 * 2 * s * b * act_bytes)

    if plan.selective:
        return (per_layer("selective"),) * plan.n_layer
    heads, ckpt = dict(plan.segments), set(plan.checkpointed)
    return tuple(per_layer("full") if i in heads else 0 if i in ckpt else per_layer("none")
                 for i in range(plan.n_layer))


def predicted_extra_flops(cfg: GPTConfig, batch: int, plan: RecomputePlan, early_stop: bool = True) -> int:
    """FLOPs recompute adds: one more forward of every checkpointed block (Narayanan et al. 2021 counts).

    Selective repeats the attention core: Q K^T and (dropout output) x V, 4bs^2h per layer as in
    ``estimate.training_flops``. With torch's early stop the second product is not repeated
    (it saves its inputs, which are back once the dropout has been replayed): 2bs^2h per layer.
    """
    shape, s, b = ModelShape.from_config(cfg), cfg.seq_len, batch
    if plan.selective:
        extra = training_flops(shape, s, b, "selective") - training_flops(shape, s, b, "none")
        return int(extra // 2 if early_stop else extra)
    per_block = (training_flops(shape, s, b, "full") - training_flops(shape, s, b, "none")) / cfg.n_layer
    return int(per_block * len(plan.checkpointed))


def run_plan(train: TrainConfig, plan: RecomputePlan | str, k: int | None = None, early_stop: bool = True,
             repeats: int = 5) -> tuple[RecomputeRow, list[torch.Tensor]]:
    """One real forward + backward on batch 0 under ``plan``: saved bytes, FLOPs, seconds and the gradients.

    Measuring through checkpoint: non-reentrant checkpoint saves a region's inputs through the
    outer saved-tensor hooks, so ``SavedTensorRecorder`` sees them, named after the checkpointed
    module. Tensors saved inside the region go to checkpoint's own inner hooks, which keep
    nothing: the recorder's count is what the step holds, byte for byte (MemTracker agrees up
    to the step's outputs, see ``after_forward_bytes``).
    """
    trainer = Trainer(train)
    plan = apply_recompute(trainer.model, plan, k, early_stop)
    model, e = trainer.model, 4 if train.precision == "fp32" else 2
    x, y = trainer.data(0)
    with SavedTensorRecorder(model, exclude=(x, y)) as rec, FlopCounterMode(display=False) as flops:
        _, loss = model(x, y)
        loss.backward()
    grads = [p.grad.detach().clone() for p in model.parameters()]
    seconds = []  # wall clock of the same step again: shown, never asserted
    for _ in range(repeats):
        trainer.optimizer.zero_grad(set_to_none=True)
        start = time.perf_counter()
        model(x, y)[1].backward()
        seconds.append(time.perf_counter() - start)
    per_layer = tuple(sum(t.nbytes for t in rec.saved if t.layer == i) for i in range(plan.n_layer))
    b = train.batch_size
    none_flops = int(training_flops(ModelShape.from_config(train.model), train.model.seq_len, b))
    row = RecomputeRow(
        mode=plan.name, measured_bytes=sum(per_layer),
        predicted_bytes=sum(predicted_layer_bytes(train.model, b, plan, e)),
        per_layer=per_layer, outside_bytes=sum(t.nbytes for t in rec.saved if t.layer is None),
        flops=flops.get_total_flops(), extra_flops=flops.get_total_flops() - none_flops,
        predicted_extra_flops=predicted_extra_flops(train.model, b, plan, early_stop), grads_identical=False,
        loss=loss.item(), step_seconds=statistics.median(seconds))  # one sample on 2 loaded cores can mislead
    return row, grads


def compare_plans(train: TrainConfig, plans: list[RecomputePlan | str] | None = None, k: int = 2,
                  early_stop: bool = True) -> list[RecomputeRow]:
    """Every plan beside no recompute: bytes, FLOPs, and whether loss and gradients are bit-identical.

    Dropout stays on: checkpoint stashes the RNG state before a region and restores it for the
    recomputation, so the replayed masks equal the first ones and the gradients match bit for bit.
    """
    base, base_grads = run_plan(train, "none")
    rows = []
    for plan in plans or MODES:
        row, grads = (base, base_grads) if plan == "none" else run_plan(train, plan, k, early_stop)
        same = row.loss == base.loss and all(torch.equal(a, b) for a, b in zip(grads, base_grads, strict=True))
        rows.append(replace(row, grads_identical=same, extra_flops=row.flops - base.flops))
    return rows


def after_forward_bytes(train: TrainConfig, plan: RecomputePlan | str, k: int | None = None) -> int:
    """Activations alive after forward by torch's ``MemTracker`` (``labkit.measure.phase_memory``).

    It counts the saved tensors plus the step's outputs (logits, loss), which autograd does not
    save. It misses the CPU RNG state checkpoint stashes per region (``torch.get_rng_state``
    bypasses the dispatcher): 5,056 bytes per region, host memory even on a GPU.
    """
    trainer = Trainer(train)
    apply_recompute(trainer.model, plan, k)
    trainer.step()
    return phase_memory(trainer)["after forward"]["activations"]


def recompute_table(rows: list[RecomputeRow]) -> str:
    """The deterministic columns of :func:`compare_plans` (step seconds are left out: they vary)."""
    return text_table(
        ["mode", "measured B", "predicted B", "error %", "FLOPs", "extra FLOPs", "predicted extra", "grads identical"],
        [[r.mode, f"{r.measured_bytes:,}", f"{r.predicted_bytes:,}", f"{r.error_percent:.2f}", f"{r.flops:,}",
          f"{r.extra_flops:,}", f"{r.predicted_extra_flops:,}", "yes" if r.grads_identical else "NO"] for r in rows])
