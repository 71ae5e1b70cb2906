"""The real training trace a memory hierarchy replays: what each op of one step read and created.

``record_trace`` runs one real step of the tiny GPT and writes down, op by op in the order
they ran, what each op read and created: the weights a module reads in forward (its
forward pre-hook), every storage autograd saves (its creation, through
``saved_tensors_hooks``), every unpack in backward (including the weights autograd kept,
so backward weight reads are the real ones: an embedding's backward reads no weight), and
the FLOPs torch's ``FlopCounterMode`` counted between op boundaries. Gradients and the
optimizer step are left out (``near_data`` is about the step). ``hierarchy`` replays it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.utils.flop_counter import FlopCounterMode

from labkit.measure import ModuleHooks
from labkit.rig.step import StepHooks, training_step


@dataclass(frozen=True)
class Block:
    """One weight or one saved storage: ``kind`` "weight" or "activation"."""

    name: str
    kind: str
    nbytes: int


@dataclass(frozen=True)
class Op:
    """One op of the step: a module's forward or backward, what it read and created (block ids)."""

    phase: str  # "forward" or "backward"
    module: str
    flops: int
    reads: tuple[int, ...]
    writes: tuple[int, ...]


@dataclass(frozen=True)
class StepTrace:
    """Blocks and ops of one real step, in the order they ran."""

    blocks: tuple[Block, ...]
    ops: tuple[Op, ...]
    dtype: str  # roofline dtype of the run: "fp32" or "bf16"

    def bytes_of(self, kind: str) -> int:
        return sum(b.nbytes for b in self.blocks if b.kind == kind)

    @property
    def working_set(self) -> int:
        """Every byte the step touches: all weights plus all saved activations."""
        return sum(b.nbytes for b in self.blocks)


class _Recorder(ModuleHooks):
    def __init__(self, model: torch.nn.Module, exclude: tuple[torch.Tensor, ...]) -> None:
        super().__init__(model)
        self.pnames = {p.untyped_storage().data_ptr(): n for n, p in model.named_parameters()}
        self.skip = {t.untyped_storage().data_ptr() for t in (*model.buffers(), *exclude)}
        self.ids: dict[object, int] = {}
        self.blocks: list[Block] = []
        self.ops: list[list] = []  # [phase, module, flops at open, reads, writes]
        self.counter = FlopCounterMode(display=False)

    def _block(self, key: object, name: str, kind: str, nbytes: int) -> int:
        if key not in self.ids:
            self.ids[key] = len(self.blocks)
            self.blocks.append(Block(name, kind, nbytes))
        return self.ids[key]

    def _open(self, phase: str, module: str) -> None:
        self.ops.append([phase, module or "<root>", self.counter.get_total_flops(), [], []])

    def _forward(self, module: torch.nn.Module, args) -> None:
        self._open("forward", self.module)
        for p in module.parameters(recurse=False):
            key = p.untyped_storage().data_ptr()
            self.ops[-1][3].append(self._block(key, self.pnames[key], "weight", p.untyped_storage().nbytes()))

    def _pack(self, t: torch.Tensor):
        key = t.untyped_storage().data_ptr()
        if key in self.skip or not t.numel():
            return (None, t, "")
        if key not in self.ids and key not in self.pnames:
            name = f"{self.module or '<root>'}:{len(self.blocks)}"
            self.ops[-1][4].append(self._block(key, name, "activation", t.untyped_storage().nbytes()))
        return (key, t, self.module)

    def _unpack(self, packed):
        key, t, owner = packed
        if key is not None:
            if self.ops[-1][0] != "backward" or self.ops[-1][1] != owner:
                self._open("backward", owner)
            self.ops[-1][3].append(self.ids[key])
        return t

    def __enter__(self):
        super().__enter__()
        for m in self.names:
            if not list(m.children()) or list(m.parameters(recurse=False)):
                self._handles.append(m.register_forward_pre_hook(self._forward))
        self.counter.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self.counter.__exit__(*exc)
        super().__exit__(*exc)


def record_trace(trainer, step: int | None = None) -> StepTrace:
    """Run one real forward and backward of ``trainer`` and record its trace; the optimizer step runs after.

    A weight's block is named by its parameter (tied weights are one block); an activation by the
    module that saved it and its block id. FLOPs between two op boundaries belong to the op opened first.
    """
    recs: list[_Recorder] = []

    def record(batch) -> _Recorder:
        recs.append(_Recorder(trainer.model, tuple(batch)))
        return recs[0]

    training_step(trainer, step, StepHooks(around=record))
    rec = recs[0]
    total = rec.counter.get_total_flops()
    ops = []
    for k, (phase, module, start, reads, writes) in enumerate(rec.ops):
        end = rec.ops[k + 1][2] if k + 1 < len(rec.ops) else total
        if reads or writes or end > start:
            ops.append(Op(phase, module, int(end - start), tuple(dict.fromkeys(reads)), tuple(writes)))
    dtype = "bf16" if trainer.cfg.precision == "bf16-mixed" else "fp32"
    return StepTrace(tuple(rec.blocks), tuple(ops), dtype)
