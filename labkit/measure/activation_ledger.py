"""Two activation totals, one ledger: what autograd saves beside what torch's MemTracker sees.

``measure.measure_step`` counts the tensors autograd *saves for backward* (through
``saved_tensors_hooks``). ``measure.phase_memory`` reads torch's ``MemTracker``, which files
*every* tensor created in the forward pass as an activation, including forward outputs
that no backward needs: the logits (cross-entropy saves its own log-softmax, not its
input) and the loss. This module measures each part on a real forward pass of the same
model and batch shape, so a notebook can show, computed, that the two totals differ by
exactly those outputs, and that what MemTracker still holds after backward is those same
outputs plus backward's seed gradient (d loss / d loss, one element like the loss).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from labkit.measure import SavedTensorRecorder, phase_memory
from labkit.rig.train import Trainer


def _nbytes(t) -> int:
    return t.untyped_storage().nbytes()


@dataclass(frozen=True)
class ActivationLedger:
    """Bytes of one real step's activations, each part measured (all in bytes)."""

    per_layer: tuple[int, ...]  # saved for backward by each transformer layer
    outside: dict[str, int]  # saved for backward outside the layers, by module ("" is the loss function)
    unsaved_outputs: dict[str, int]  # forward outputs autograd does not save: logits, loss
    seed_gradient: int  # backward's d loss / d loss, created before any module's backward runs
    phases: dict[str, dict[str, int]] = field(default_factory=dict)  # MemTracker's table, by phase

    @property
    def saved(self) -> int:
        """What ``measure_step`` reports as activations: every saved storage once."""
        return sum(self.per_layer) + sum(self.outside.values())

    @property
    def after_forward(self) -> int:
        """Saved for backward plus the forward's outputs: what MemTracker should see after forward."""
        return self.saved + sum(self.unsaved_outputs.values())

    @property
    def after_backward(self) -> int:
        """The outputs the step still references, plus the seed gradient."""
        return sum(self.unsaved_outputs.values()) + self.seed_gradient

    @property
    def tracker_after_forward(self) -> int:
        return self.phases["after forward"]["activations"]

    @property
    def tracker_after_backward(self) -> int:
        return self.phases["after backward"]["activations"]

    def rows(self) -> list[tuple[str, int]]:
        """The reconciliation, line by line, ending in MemTracker's after-forward total."""
        out = [(f"saved by layer {i}", n) for i, n in enumerate(self.per_layer)]
        out += [(f"saved outside the layers: {name or 'loss function'}", n) for name, n in self.outside.items()]
        out.append(("= saved for backward (measure_step)", self.saved))
        out += [(f"+ {name} (a forward output nothing saves)", n) for name, n in self.unsaved_outputs.items()]
        out.append(("= alive after forward (this ledger)", self.after_forward))
        out.append(("  MemTracker's activations after forward", self.tracker_after_forward))
        return out


def activation_ledger(trainer: Trainer, step: int | None = None) -> ActivationLedger:
    """Measure the ledger on batch ``step`` (default: the next), then run that step under MemTracker.

    The first forward is recorded and dropped (no backward, no update): its saved tensors and
    outputs have the sizes the tracked step's have, because the shapes do not depend on the data.
    Run it after one step, so the optimizer states exist (as ``phase_memory`` asks).
    """
    i = trainer.steps_done if step is None else step
    model = trainer.model
    model.train()
    x, y = trainer.data(i)
    with SavedTensorRecorder(model, exclude=(x, y)) as rec, trainer.forward_context():
        logits, loss = model(x, y)
    kept = set(rec.records)
    unsaved = {name: _nbytes(t) for name, t in (("logits", logits), ("loss", loss))
               if t.untyped_storage().data_ptr() not in kept}
    seed = loss.numel() * loss.element_size()
    saved = rec.saved
    n_layers = max((t.layer for t in saved if t.layer is not None), default=-1) + 1
    per_layer = [0] * n_layers
    outside: dict[str, int] = {}
    for t in saved:
        if t.layer is None:
            outside[t.module] = outside.get(t.module, 0) + t.nbytes
        else:
            per_layer[t.layer] += t.nbytes
    del logits, loss, rec
    return ActivationLedger(tuple(per_layer), outside, unsaved, seed, phase_memory(trainer, i))
