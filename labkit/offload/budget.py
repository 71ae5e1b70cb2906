"""A budgeted device: a simulated device-memory capacity that a real micro-run must fit.

The tiny GPT fits in any laptop's memory, so it never feels what a 13B model feels on
an 80 GB card. Here a real training step runs against a *counted* capacity, scaled so
the tiny model is as tight as the real one (:func:`scaled_capacity`). What is counted:

* model states, held for the whole step: parameters, gradients and optimizer states,
  16 bytes per parameter for both fp32 AdamW (4 + 4 + 8) and bf16-mixed (2 + 2 + 12)
  as in ZeRO (Rajbhandari et al., SC 2020);
* activations saved for backward, seen through ``torch.autograd.graph.saved_tensors_hooks``,
  each storage counted once (views share it) from the moment it is saved until autograd
  releases it after its backward node ran. Parameters, buffers and the batch are left out,
  as in ``labkit.measure``. Temporaries are not counted: this is the saved-tensor budget.

The moment a storage does not fit, :class:`DeviceOutOfMemory` names the module that saved
it, its bytes, the bytes in use and the capacity. ``labkit.offload.vdnn`` shares the same
counter: an offloaded tensor stops counting once it is copied out, and counts again while
it is prefetched back (vDNN, Rhu et al., MICRO 2016).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn as nn

from labkit.errors import LabkitError, require_positive
from labkit.hardware import gpu as find_gpu
from labkit.measure import ModuleHooks
from labkit.predict.offload_model import ZERO3
from labkit.rig.model import count_parameters
from labkit.rig.step import StepHooks, training_step
from labkit.rig.train import batch_tensors

BYTES_PER_PARAM = int(ZERO3.gpu_bytes_per_param(1))  # ZeRO's 2 + 2 + 12 (mixed) = 4 + 4 + 8 (fp32 AdamW)


class DeviceOutOfMemory(LabkitError):
    """A simulated device ran out of its budget; the message names what did not fit."""


def storage_key(t: torch.Tensor) -> int:
    """One key per storage: views of one buffer share it, so it is counted once."""
    return t.untyped_storage().data_ptr()


def model_state_bytes(model: nn.Module, bytes_per_param: int = BYTES_PER_PARAM) -> int:
    """Parameters + gradients + optimizer states of ``model``, by ZeRO's 16 bytes per parameter."""
    return count_parameters(model) * bytes_per_param


def scaled_capacity(gpu: str, real_params: float, tiny_state_bytes: int,
                    bytes_per_param: int = BYTES_PER_PARAM) -> int:
    """The budget that makes the tiny model as tight as ``real_params`` on ``gpu``.

    capacity = gpu memory * tiny model states / real model states, the GPU's memory being its true
    capacity (``Device.memory_bytes``: an "80 GB" A100 holds 80 GiB = 85.9e9 B). A 4bn-parameter
    model (64e9 B of states) on it leaves 25% for activations; so does the budget.
    """
    require_positive("real_params", real_params, integer=False)
    require_positive("tiny_state_bytes", tiny_state_bytes)
    real_states = real_params * bytes_per_param
    return round(find_gpu(gpu).memory_bytes * tiny_state_bytes / real_states)


@dataclass
class ResidentCounter:
    """Bytes resident on the simulated device: constant model states plus live activations."""

    capacity: int | None = None  # None: count, never refuse
    states: int = 0
    live: dict[int, tuple[str, int]] = field(default_factory=dict)  # key -> (module, bytes)
    activations: int = 0
    peak: int = 0

    def __post_init__(self) -> None:
        if self.capacity is not None:
            require_positive("capacity", self.capacity)
        if self.capacity is not None and self.states > self.capacity:
            raise DeviceOutOfMemory(f"model states of {self.states:,} bytes do not fit the device "
                                    f"capacity of {self.capacity:,} bytes")
        self.peak = self.states

    @property
    def in_use(self) -> int:
        return self.states + self.activations

    def alloc(self, key: int, nbytes: int, module: str, what: str = "saved tensor") -> None:
        """Count a storage as resident, or raise naming it if it does not fit."""
        if key in self.live:
            return
        if self.capacity is not None and self.in_use + nbytes > self.capacity:
            raise DeviceOutOfMemory(
                f"{what} of module {module or '<root>'!r} ({nbytes:,} bytes) does not fit: "
                f"{self.in_use:,} bytes in use of a capacity of {self.capacity:,} bytes "
                f"(model states {self.states:,}, activations {self.activations:,})")
        self.live[key] = (module, nbytes)
        self.activations += nbytes
        self.peak = max(self.peak, self.in_use)

    def free(self, key: int) -> None:
        module_bytes = self.live.pop(key, None)
        if module_bytes is not None:
            self.activations -= module_bytes[1]


class _Held:
    """What autograd keeps instead of a tensor; its death is the storage's release."""

    __slots__ = ("owner", "key", "tensor", "meta", "gen")

    def __init__(self, owner: SavedHooks, key: int, tensor: torch.Tensor | None, meta: object = None) -> None:
        self.owner, self.key, self.tensor, self.meta, self.gen = owner, key, tensor, meta, owner.gen

    def __del__(self) -> None:
        owner = self.owner
        if owner is not None and owner.gen == self.gen:
            owner._drop(self.key)


class SavedHooks(ModuleHooks):
    """Saved-tensor hooks with a module stack, per-storage reference counts and an event clock.

    Subclasses (the budget, the tracer, the offloader) override ``_new``, ``_unpack`` and
    ``_released``. ``clock`` ticks on every pack and unpack of an activation.
    """

    def __init__(self, model: nn.Module, exclude: tuple[torch.Tensor, ...] = ()) -> None:
        super().__init__(model)
        self.types = {n: type(m).__name__ for m, n in self.names.items()}
        self.skip = {storage_key(t) for t in (*model.parameters(), *model.buffers(), *exclude)}
        self.refs: dict[int, int] = {}
        self.clock = 0
        self.gen = 0  # a new step forgets what the last one left behind

    def exclude(self, *tensors: torch.Tensor) -> None:
        """Leave these storages (a new batch) out of the count."""
        self.skip |= {storage_key(t) for t in tensors}

    def _pack(self, t: torch.Tensor):
        key = storage_key(t)
        if key in self.skip or not t.numel():
            return t
        self.clock += 1
        module = self.stack[-1] if self.stack else ""
        if key not in self.refs:
            self.refs[key] = 0
            self._new(key, t, module, t.untyped_storage().nbytes())
        self.refs[key] += 1
        return self._hold(key, t)

    def _hold(self, key: int, t: torch.Tensor) -> _Held:
        return _Held(self, key, t)

    def _unpack(self, held):
        if not isinstance(held, _Held):
            return held
        self.clock += 1
        return self._restore(held)

    def _drop(self, key: int) -> None:
        if key in self.refs:
            self.refs[key] -= 1
            if self.refs[key] <= 0:
                del self.refs[key]
                self._released(key)

    def _new(self, key: int, t: torch.Tensor, module: str, nbytes: int) -> None: ...

    def _restore(self, held: _Held) -> torch.Tensor:
        return held.tensor

    def _released(self, key: int) -> None: ...


class BudgetedDevice(SavedHooks):
    """Run real steps inside a simulated capacity; ``counter.peak`` is the most it held.

    Use as a context manager around forward *and* backward: a saved storage counts until
    autograd frees it after its backward node, so the peak falls at the end of forward.
    """

    def __init__(self, model: nn.Module, capacity: int | None, states: int | None = None,
                 exclude: tuple[torch.Tensor, ...] = ()) -> None:
        super().__init__(model, exclude)
        self.counter = ResidentCounter(capacity, model_state_bytes(model) if states is None else states)

    def _new(self, key: int, t: torch.Tensor, module: str, nbytes: int) -> None:
        try:
            self.counter.alloc(key, nbytes, module)
        except DeviceOutOfMemory:
            del self.refs[key]
            raise

    def _released(self, key: int) -> None:
        self.counter.free(key)


def budgeted_step(trainer, capacity: int | None, step: int | None = None) -> ResidentCounter:
    """One real training step of ``trainer`` against ``capacity`` bytes (under its autocast); returns the counter.

    Raises :class:`DeviceOutOfMemory` (gradients of the failed step are cleared) when it does not fit.
    """
    dev = BudgetedDevice(trainer.model, capacity)

    def around(batch) -> BudgetedDevice:
        dev.exclude(*batch_tensors(batch))
        return dev

    try:
        training_step(trainer, step, StepHooks(around=around))
    except DeviceOutOfMemory:
        trainer.optimizer.zero_grad(set_to_none=True)
        raise
    return dev.counter
