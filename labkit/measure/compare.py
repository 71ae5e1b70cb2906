"""Measured beside predicted: the tables the notebooks print and the tests assert on.

A ``Comparison`` holds :class:`labkit.measure.record.Record` rows: each a measured value from
``labkit.measure`` and the value ``labkit.predict.estimate`` predicts for the same configuration;
``worst_error`` is what a notebook asserts and a test bounds.
"""

from __future__ import annotations

from dataclasses import dataclass

from labkit.measure import StepMemory
from labkit.measure.record import Record
from labkit.predict.activation_terms import activation_terms
from labkit.predict.estimate import PRECISIONS, TrainingSetup, estimate_memory
from labkit.shapes import ModelShape

SOURCE = "labkit.predict.estimate (ZeRO's model states, Korthikanti et al.'s activations)"
KORTHIKANTI = "Korthikanti et al. 2022, Table 2's terms"


@dataclass(frozen=True)
class Comparison:
    title: str
    rows: tuple[Record, ...]
    unit: str = "bytes"

    @property
    def worst_error(self) -> float:
        return max(abs(r.error) for r in self.rows)

    def __str__(self) -> str:
        width = max(len(r.name) for r in self.rows)
        lines = [self.title, f"{'':{width}}  {'measured':>12}  {'predicted':>12}  {'error':>7}"]
        for r in self.rows:
            note = f"  {r.note}" if r.note else ""
            lines.append(f"{r.name:{width}}  {r.measured:12,.0f}  {r.predicted:12,.0f}  {100 * r.error:6.2f}%{note}")
        lines.append(f"(all in {self.unit}; worst error {100 * self.worst_error:.2f}%)")
        return "\n".join(lines)

    def _repr_pretty_(self, p, cycle) -> None:
        p.text(str(self))


def setup_for(shape: ModelShape, micro_batch: int, precision: str, attention: str = "explicit",
              mask_bytes: int = 1) -> TrainingSetup:
    """The estimate's description of a measured single-device micro-run."""
    return TrainingSetup(shape, micro_batch=micro_batch, seq=shape.seq, precision=precision,
                         attention=attention, mask_bytes=mask_bytes)


def memory_comparison(measured: StepMemory, setup: TrainingSetup) -> Comparison:
    """Parameters, gradients, optimizer states and activations: measured beside the ZeRO/Korthikanti model."""
    est = estimate_memory(setup).per_device_bytes
    rows = (
        Record("parameters", measured.parameters, est["parameters"], "bytes", SOURCE),
        Record("gradients", measured.gradients, est["gradients"], "bytes", SOURCE),
        Record("optimizer states", measured.optimizer, est["optimizer"], "bytes", SOURCE),
        Record("activations", measured.activations, est["activations"], "bytes", SOURCE),
    )
    return Comparison(f"One training step, {setup.precision}, {setup.attention} attention", rows)


def layer_comparison(measured: StepMemory, setup: TrainingSetup, layer: int = 0) -> Comparison:
    """One layer's saved tensors, module by module, beside Korthikanti et al.'s terms."""
    e = PRECISIONS[setup.precision].activation
    terms = activation_terms(setup.shape, setup.seq_len, setup.micro_batch, e, setup.mask_bytes, setup.attention)
    by_role = measured.by_role(layer)
    rows = []
    for t in terms:
        note = "+ mean and rstd, not in the paper" if t.role.startswith("ln_") else t.what
        rows.append(Record(t.role, by_role.pop(t.role, 0), t.bytes, "bytes", KORTHIKANTI, note=note))
    rows += [Record(role, nbytes, 0, "bytes", KORTHIKANTI, note="not in the model") for role, nbytes in by_role.items()]
    return Comparison(f"Layer {layer}: bytes saved for backward, by the module that saved them", tuple(rows))
