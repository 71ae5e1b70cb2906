"""The H200 measurements kept as a reference: every whole-step peak measured there beside today's prediction.

``datasets/measurements/h200-2026-12.jsonl`` holds what ``labkit measure --device cuda --precision bf16-mixed
--attention sdpa --dropout 0`` measured on one NVIDIA H200 (its first line names the setup). Each row is
predicted again here with ``labkit.predict.step_peak`` for the same model, batch, sequence and layer count, on
CUDA (compute capability 9: two 32 MiB cuBLAS workspaces). The caching allocator's reserve beyond the
allocated peak, measured on every row, sets the margin the fit verdicts state (``labkit.predict.allocator``).
Torch-free.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from labkit.predict.allocator import records
from labkit.predict.step_inputs import hf_step_shape
from labkit.predict.step_peak import StepPeak, step_peak
from labkit.shapes.hf_config import from_config, resolve


@dataclass(frozen=True)
class ReferenceRow:
    """One measured step on the H200 beside its prediction (bytes)."""

    case: str
    layers: int | None
    batch: int
    seq: int
    measured: int
    phase: str
    reserved: int
    activations: tuple[int, float]  # measured, predicted then
    predicted: StepPeak

    @property
    def ratio(self) -> float:
        return self.measured / self.predicted.peak

    @property
    def reserve_share(self) -> float:
        return (self.reserved - self.measured) / self.measured


def spec_of(case: str, layers: int | None):
    """The shipped config ``case``, built with only ``layers`` layers when given (as ``labkit measure --layers``)."""
    spec = from_config(resolve(case))
    if layers is None:
        return spec
    key = "n_layer" if spec.family == "gpt2" else "num_hidden_layers"
    return from_config(spec.config | {key: layers}, name=f"{case} ({layers} layers)")


@lru_cache(maxsize=2)
def h200_rows(path: str | None = None) -> tuple[ReferenceRow, ...]:
    """Every ``labkit measure`` row of the file, predicted again."""
    out = []
    for r in records(path):
        peak = r.get("peak") or r.get("measure", {}).get("peak")
        if not peak or "case" not in r:
            continue
        cats = r.get("categories") or r["measure"]["categories"]
        batch, seq = r.get("batch", r.get("b")), r.get("seq", r.get("s"))
        spec = spec_of(r["case"], r.get("layers"))
        shape = hf_step_shape(spec, batch, seq, "bf16-mixed", "sdpa", False, 0.0, "cuda", "lab", 9)
        out.append(ReferenceRow(r["case"], r.get("layers"), batch, seq, peak["measured"], peak["phase"],
                                peak["reserved"], tuple(cats["activations"]), step_peak(shape)))
    return tuple(out)
