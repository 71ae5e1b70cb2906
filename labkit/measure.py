"""What a real training step holds: bytes by category, tensor by tensor, and its FLOPs.

Everything here is read off a real step of a real model:

* parameters, gradients and optimizer states are summed over distinct storages
  (tied weights and views counted once);
* activations are the tensors autograd saves for backward, seen through
  ``torch.autograd.graph.saved_tensors_hooks``; each storage is counted once and
  attributed to the module that saved it first (parameters, buffers and the batch
  itself are left out);
* the memory of each phase of the step (before and after forward, peak of
  backward, after backward) comes from torch's own ``MemTracker``, which also sees
  temporaries;
* FLOPs come from torch's ``FlopCounterMode``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

import torch
import torch.nn as nn
from torch.utils.flop_counter import FlopCounterMode

from labkit.train import MasterWeightAdamW, Trainer


@dataclass(frozen=True)
class SavedTensor:
    """One storage autograd kept: who saved it, its shape and its bytes."""

    module: str  # qualified module name, e.g. "h.0.attn.core.softmax"
    shape: tuple[int, ...]
    dtype: str
    nbytes: int

    @property
    def layer(self) -> int | None:
        """Index of the transformer layer that saved it, or None outside the layers."""
        parts = self.module.split(".")
        return int(parts[1]) if len(parts) > 1 and parts[0] == "h" else None

    @property
    def role(self) -> str:
        """The module path inside its layer ("attn.core.softmax"), or the module name."""
        return self.module.split(".", 2)[2] if self.layer is not None else self.module


@dataclass
class StepMemory:
    """Bytes a training step holds, by category (all measured, in bytes)."""

    parameters: int
    gradients: int
    optimizer: int
    optimizer_bookkeeping: int  # Adam's step counters: one scalar per parameter tensor
    saved: list[SavedTensor] = field(default_factory=list)
    batch: int = 0  # the input ids and targets autograd keeps

    @property
    def activations(self) -> int:
        return sum(t.nbytes for t in self.saved)

    @property
    def n_layers(self) -> int:
        layers = [t.layer for t in self.saved if t.layer is not None]
        return max(layers) + 1 if layers else 0

    def activations_per_layer(self) -> list[int]:
        out = [0] * self.n_layers
        for t in self.saved:
            if t.layer is not None:
                out[t.layer] += t.nbytes
        return out

    def by_role(self, layer: int = 0) -> dict[str, int]:
        """Saved bytes of one layer grouped by the module that saved them."""
        out: dict[str, int] = defaultdict(int)
        for t in self.saved:
            if t.layer == layer:
                out[t.role] += t.nbytes
        return dict(out)

    def outside_layers(self) -> dict[str, int]:
        """Saved bytes of the embedding and the head (everything not in a layer)."""
        out: dict[str, int] = defaultdict(int)
        for t in self.saved:
            if t.layer is None:
                out[t.module] += t.nbytes
        return dict(out)

    @property
    def model_states(self) -> int:
        return self.parameters + self.gradients + self.optimizer


def _storage_key(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr()


def unique_bytes(tensors: Iterable[torch.Tensor | None]) -> int:
    """Bytes of the distinct storages behind ``tensors``: tied weights and views counted once, None skipped."""
    seen: dict[int, int] = {}
    for t in tensors:
        if t is not None and t.numel():
            seen[_storage_key(t)] = t.untyped_storage().nbytes()
    return sum(seen.values())




class ModuleHooks:
    """Saved-tensor hooks that know which module is running: the base of every byte counter here.

    Module pre/post hooks keep a stack of qualified module names, so ``self.module``
    names the innermost module when autograd saves a tensor. Subclasses implement
    ``_pack`` (and ``_unpack`` when they replace what autograd keeps); the recorder
    below, ``offload.budget``'s counters and ``intra_layer.megatron``'s all build on it.
    """

    def __init__(self, model: nn.Module) -> None:
        self.model = model
        self.names = {m: n for n, m in model.named_modules()}
        self.stack: list[str] = []
        self._handles: list = []
        self._hooks = None

    @property
    def module(self) -> str:
        return self.stack[-1] if self.stack else ""

    def _pack(self, t: torch.Tensor):
        raise NotImplementedError

    def _unpack(self, packed):
        return packed

    def _leave(self, module: nn.Module, args, output) -> None:
        self.stack.pop()

    def __enter__(self):
        for m, name in self.names.items():
            self._handles.append(m.register_forward_pre_hook(lambda mod, args, n=name: self.stack.append(n)))
            self._handles.append(m.register_forward_hook(self._leave))
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        if self._hooks is not None:
            self._hooks.__exit__(*exc)
            self._hooks = None
        for h in self._handles:
            h.remove()
        self._handles.clear()
        self.stack.clear()


class SavedTensorRecorder(ModuleHooks):
    """Context manager recording every tensor autograd saves during a forward pass.

    Each saved storage is attributed to the innermost module running when it was saved.
    """

    def __init__(self, model: nn.Module, exclude: tuple[torch.Tensor, ...] = ()) -> None:
        super().__init__(model)
        self.skip = {_storage_key(t) for t in (*model.parameters(), *model.buffers())}
        self.inputs = {_storage_key(t): t.untyped_storage().nbytes() for t in exclude}
        self.records: dict[int, SavedTensor] = {}
        self.batch_seen: set[int] = set()

    def _pack(self, t: torch.Tensor) -> torch.Tensor:
        key = _storage_key(t)
        if key in self.inputs:
            self.batch_seen.add(key)
        elif key not in self.skip and key not in self.records and t.numel():
            nbytes = t.untyped_storage().nbytes()
            self.records[key] = SavedTensor(self.module, tuple(t.shape), str(t.dtype).replace("torch.", ""), nbytes)
        return t

    @property
    def saved(self) -> list[SavedTensor]:
        return list(self.records.values())

    @property
    def batch_bytes(self) -> int:
        return sum(self.inputs[k] for k in self.batch_seen)


def optimizer_bytes(optimizer: torch.optim.Optimizer | MasterWeightAdamW) -> tuple[int, int]:
    """(per-parameter state bytes, bookkeeping bytes) of an optimizer: moments apart from 0-dim step counters."""
    if hasattr(optimizer, "state_tensors"):
        states = optimizer.state_tensors()
        scalars = [t for s in optimizer.state.values() for t in s.values() if not t.dim()]
    else:
        tensors = [t for s in optimizer.state.values() for t in s.values() if torch.is_tensor(t)]
        states = [t for t in tensors if t.dim()]
        scalars = [t for t in tensors if not t.dim()]
    return unique_bytes(states), sum(t.untyped_storage().nbytes() for t in scalars)


def measure_step(trainer: Trainer, step: int | None = None) -> StepMemory:
    """Run one real training step and return what it held.

    Activations are those saved by the forward pass of this step; gradients are
    read after backward; optimizer states after the optimizer step (the first step
    creates them). The trainer's state advances exactly as ``trainer.step`` would.
    """
    i = trainer.steps_done if step is None else step
    model, opt = trainer.model, trainer.optimizer
    model.train()
    x, y = trainer.data(i)
    with SavedTensorRecorder(model, exclude=(x, y)) as rec, trainer.forward_context():
        _, loss = model(x, y)
    trainer.backward(loss)
    grads = unique_bytes(p.grad for p in model.parameters())
    opt.step()
    opt.zero_grad(set_to_none=True)
    trainer.steps_done = i + 1
    states, bookkeeping = optimizer_bytes(opt)
    return StepMemory(unique_bytes(model.parameters()), grads, states, bookkeeping, rec.saved, rec.batch_bytes)


PHASES = ("before forward", "after forward", "peak backward", "after backward")
CATEGORIES = ("parameters", "gradients", "optimizer", "activations", "temporaries", "other")


def phase_memory(trainer: Trainer, step: int | None = None) -> dict[str, dict[str, int]]:
    """Memory by category at each phase of one real step, from torch's ``MemTracker``.

    Run it after at least one step, so the optimizer states already exist. MemTracker
    files every tensor alive before the step that is not model state (the corpus, the
    batch) as an activation; those are moved to ``other`` here. Use it on fp32 runs:
    it does not know that the master weights of ``MasterWeightAdamW`` are optimizer state.
    """
    from torch.distributed._tools.mem_tracker import MemTracker, _MemRefType, _ModState

    i = trainer.steps_done if step is None else step
    inner = getattr(trainer.optimizer, "inner", trainer.optimizer)
    mt = MemTracker()
    mt.track_external(trainer.model, inner)
    with mt:
        trainer.step(i)
    snaps = mt.memory_tracking[trainer.model].snapshots
    kinds = {
        "parameters": _MemRefType.PARAM, "gradients": _MemRefType.GRAD, "optimizer": _MemRefType.OPT,
        "activations": _MemRefType.ACT, "temporaries": _MemRefType.TEMP,
    }
    states = dict(zip(PHASES, (_ModState.PRE_FW, _ModState.POST_FW, _ModState.PEAK_BW, _ModState.POST_BW), strict=True))
    out: dict[str, dict[str, int]] = {}
    baseline = None  # tensors alive before the step (the corpus, say) are "other", not activations
    for phase, state in states.items():
        snap = next(iter(snaps[state][-1].values()))
        row = {c: int(snap[k]) for c, k in kinds.items()}
        baseline = row["activations"] if baseline is None else baseline
        row["activations"] -= baseline
        row["other"] = int(snap["Total"]) - sum(row.values())
        out[phase] = row
    return out


@dataclass(frozen=True)
class StepFlops:
    """Floating-point operations of one step, counted by ``FlopCounterMode``."""

    forward: int
    backward: int

    @property
    def total(self) -> int:
        return self.forward + self.backward


def measure_flops(trainer: Trainer, step: int = 0) -> StepFlops:
    """FLOPs of the forward and backward pass on batch ``step`` (no optimizer step)."""
    x, y = trainer.data(step)
    with FlopCounterMode(display=False) as fwd:
        _, loss = trainer.model(x, y)
    with FlopCounterMode(display=False) as bwd:
        loss.backward()
    trainer.optimizer.zero_grad(set_to_none=True)
    return StepFlops(fwd.get_total_flops(), bwd.get_total_flops())


def peak_step_bytes(trainer: Trainer, step: int | None = None) -> int:
    """The most a real step holds at once (MemTracker), leaving out data kept outside the step.

    It is what a device must fit: model states, saved activations and the
    temporaries of backward at their common peak. Run it after one step so the
    optimizer states exist.
    """
    phases = phase_memory(trainer, step)
    return max(sum(v for k, v in row.items() if k != "other") for row in phases.values())
