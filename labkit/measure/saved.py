"""What autograd keeps for backward, storage by storage, and the bytes of model states.

The base of every byte counter of the lab (``labkit.measure`` re-exports all of it):

* parameters, gradients and optimizer states are summed over distinct storages
  (tied weights and views counted once);
* activations are the tensors autograd saves for backward, seen through
  ``torch.autograd.graph.saved_tensors_hooks``; each storage is counted once and
  attributed to the module that saved it first (parameters, buffers and the batch
  itself are left out). A storage that two or more layers save (the rotary cos/sin
  tables of Llama-style models, computed once before the layers) belongs to none of
  them: it is filed under ``SHARED``, outside the layers.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

import torch
import torch.nn as nn

from labkit.rig.blocks import layer_of

SHARED = "(shared by the layers)"


@dataclass(frozen=True)
class SavedTensor:
    """One storage autograd kept: who saved it, its shape and its bytes."""

    module: str  # qualified module name, e.g. "h.0.attn.core.softmax"
    shape: tuple[int, ...]
    dtype: str
    nbytes: int
    prefix: str = "h"  # qualified name of the list of layers (``labkit.rig.blocks.find_blocks``)

    @property
    def layer(self) -> int | None:
        """Index of the transformer layer that saved it, or None outside the layers."""
        return layer_of(self.module, self.prefix)[0]

    @property
    def role(self) -> str:
        """The module path inside its layer ("attn.core.softmax"), or the module name."""
        return layer_of(self.module, self.prefix)[1]


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

    def __init__(self, model: nn.Module, exclude: tuple[torch.Tensor, ...] = (), blocks: str = "h") -> None:
        super().__init__(model)
        self.skip = {_storage_key(t) for t in (*model.parameters(), *model.buffers())}
        self.inputs = {_storage_key(t): t.untyped_storage().nbytes() for t in exclude}
        self.records: dict[int, SavedTensor] = {}
        self.layers_seen: dict[int, set[int | None]] = defaultdict(set)
        self.batch_seen: set[int] = set()
        self.blocks = blocks

    def _pack(self, t: torch.Tensor) -> torch.Tensor:
        key = _storage_key(t)
        if key in self.inputs:
            self.batch_seen.add(key)
        elif key not in self.skip and t.numel():
            if key not in self.records:
                nbytes = t.untyped_storage().nbytes()
                self.records[key] = SavedTensor(self.module, tuple(t.shape), str(t.dtype).replace("torch.", ""),
                                                nbytes, self.blocks)
            self.layers_seen[key].add(layer_of(self.module, self.blocks)[0])
        return t

    @property
    def saved(self) -> list[SavedTensor]:
        """Each saved storage once; one saved by several layers is filed under ``SHARED``."""
        out = []
        for key, rec in self.records.items():
            if len(self.layers_seen[key] - {None}) > 1:
                rec = SavedTensor(SHARED, rec.shape, rec.dtype, rec.nbytes, rec.prefix)
            out.append(rec)
        return out

    @property
    def batch_bytes(self) -> int:
        return sum(self.inputs[k] for k in self.batch_seen)


def optimizer_bytes(optimizer) -> tuple[int, int]:
    """(per-parameter state bytes, bookkeeping bytes) of an optimizer: moments apart from 0-dim step counters."""
    if hasattr(optimizer, "state_tensors"):
        states = optimizer.state_tensors()
        scalars = [t for s in optimizer.state.values() for t in s.values() if not t.dim()]
    else:
        tensors = [t for s in optimizer.state.values() for t in s.values() if torch.is_tensor(t)]
        states = [t for t in tensors if t.dim()]
        scalars = [t for t in tensors if not t.dim()]
    return unique_bytes(states), sum(t.untyped_storage().nbytes() for t in scalars)
