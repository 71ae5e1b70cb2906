"""The report of a full-size fake step (``labkit.measure.fake_full``): measured beside predicted, and the terms
only a CUDA device has, added analytically (``fake_full``'s docstring names each)."""

from __future__ import annotations

from dataclasses import dataclass, field

from labkit.measure.fake_step import RecordedStep
from labkit.measure.own_model import OwnModelReport, format_report


@dataclass
class FullReport(OwnModelReport):
    """``OwnModelReport`` of a full-size fake step, with the CUDA-only terms and the recorded step."""

    cuda: dict = field(default_factory=dict)
    recorded: RecordedStep | None = field(default=None, repr=False)

    def to_json(self) -> dict:
        out = {k: v for k, v in self.__dict__.items() if k != "recorded"}
        return {k: (dict(v) if isinstance(v, dict) else v) for k, v in out.items()}

    def __str__(self) -> str:
        text = format_report(self)
        if self.setup.get("finetune"):
            text = text.replace("labkit.predict.step_peak", "labkit.predict.finetune_peak")
        c = self.cuda
        lines = [text, f"measured under fake tensors (CPU kernels' shapes, no data) in {self.setup['seconds']:.1f} s",
                 "CUDA-only terms, analytic (a CPU build has no fake CUDA device):"]
        lines += [f"  {name}: {b:,} B" for name, b in c["terms"].items()]
        lines.append(f"  measured peak + these: {c['measured_peak']:,} B; predicted on CUDA: "
                     + ("-" if c["predicted_peak"] is None else f"{c['predicted_peak']:,.0f} B"))
        if c.get("reserved_estimate") is not None:
            lines.append(f"  reserved, an estimate (not measured): {c['reserved_estimate']:,} B, the rounded peak and "
                         f"the caching allocator's largest margin measured on the H200 ({c['reserve_share']:.1%}, "
                         "labkit.predict.allocator); peak allocated is the figure above")
        return "\n".join(lines)


_ROUNDING = "512-byte allocator rounding (counted from this step's storages)"
_ATTENTION = "CUDA's attention kernels in place of the CPU's (seed and offset; no math fallback), predicted"


def _cuda_terms(rec: RecordedStep, batch: int, seq: int, cuda_acts: float, cpu_acts: float) -> dict:
    from labkit.predict.step_peak import cublas_workspace_bytes

    return {"cuBLAS workspaces (2 x 32 MiB, compute capability 9)": 2 * cublas_workspace_bytes(9),
            "batch on the device (int64 ids, the labels the same tensor)": 8 * batch * seq,
            _ATTENTION: int(cuda_acts - cpu_acts),
            "512-byte allocator rounding (counted from this step's storages)": rec.rounded_peak - rec.peak.peak}


def _cuda_peak(by_phase: dict[str, int], attention_delta: int) -> int:
    """The step's peak with CUDA's attention kernels: their saved bytes differ only while activations are alive
    (forward and backward), so a peak in the optimizer phase, with no activation left, keeps its CPU value."""
    return max(b + (attention_delta if ph in ("forward", "backward") else 0) for ph, b in by_phase.items())


def _report(name, params, batch, seq, precision, attention, cache, trainer, rec, categories, per_layer, outside,
            cpu, cuda, assumes, extra_setup=None) -> FullReport:
    pk = rec.peak
    peak = {"measured": pk.peak, "phase": pk.phase, "predicted": cpu and cpu.peak,
            "predicted_phase": cpu and cpu.phase, "device": "cpu (fake tensors)", "reserved": None,
            "allocator_reserve": None, "by_phase": {"measured": dict(pk.by_phase), "predicted": cpu and cpu.by_phase}}
    layers = rec.memory.activations_per_layer()
    per = per_layer if not isinstance(per_layer, (list, tuple)) else None
    layer_rows = [(m, per if per is not None else (per_layer[i] if per_layer and i < len(per_layer) else None))
                  for i, m in enumerate(layers)]
    setup = {"batch": batch, "seq": seq, "precision": precision, "attention": attention, "cache": cache,
             "device": "cpu (fake tensors)", "blocks": rec.blocks, "activations assume": assumes,
             "seconds": round(rec.seconds, 3), "events": len(rec.events)} | (extra_setup or {})
    cuda_info = {"terms": {}, "measured_peak": None, "predicted_peak": None}
    if cuda is not None:
        cuda_acts, cpu_acts, predicted = cuda
        terms = _cuda_terms(rec, batch, seq, cuda_acts, cpu_acts)
        at_peak = _cuda_peak(pk.by_phase, terms[_ATTENTION])
        rest = sum(v for k, v in terms.items() if k not in (_ROUNDING, _ATTENTION))
        from labkit.predict.allocator import reserve_share

        share = reserve_share()
        cuda_info = {"terms": terms, "measured_peak": at_peak + rest,
                     "measured_peak_rounded": at_peak + rest + terms[_ROUNDING], "predicted_peak": predicted,
                     "reserved_estimate": round((at_peak + rest + terms[_ROUNDING]) * (1 + share)),
                     "reserve_share": share}
    return FullReport(name, params, setup, categories, layer_rows,
                      (sum(rec.memory.outside_layers().values()), outside), peak, {}, cuda_info, rec)
