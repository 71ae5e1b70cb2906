"""``labkit estimate``'s whole-step peak: the step of the chosen model, precision and optimizer on one GPU.

A ``--hf-config`` model's activations come from ``labkit.predict.activation_options`` (its norm, MLP and
attention as transformers writes them, without recompute); a preset's or a custom shape's from
Korthikanti et al.'s terms (``labkit.predict.estimate``). The peak, its phase and its terms come from
``labkit.predict.step_peak``, on CUDA (two cuBLAS workspaces); the caching allocator's margin from
``labkit.predict.allocator``.
"""

from __future__ import annotations

import argparse
from typing import Any

from labkit.predict.allocator import reserve_share
from labkit.predict.attention import torch_name
from labkit.predict.estimate import MemoryEstimate, TrainingSetup, step_shape
from labkit.predict.sharded_peak import ShardedStep, sharded_peak
from labkit.predict.step_peak import step_peak
from labkit.shapes import ModelShape


def predicted_peak(a: argparse.Namespace, shape: ModelShape, ts: TrainingSetup, est: MemoryEstimate,
                   states: dict[str, float] | None = None) -> dict[str, Any] | None:
    """The step's predicted peak as plain data (bytes): one GPU's share under tp, pp or ZeRO
    (``labkit.predict.sharded_peak``), else the whole step term by term (``labkit.predict.step_peak``).
    ``states`` are the table's model states per GPU under the chosen convention (ZeRO's or DeepSpeed's),
    so the peak is built on the same states the table prints."""
    if ts.tp * ts.pp != 1 or ts.zero_stage:
        return _sharded(ts, est, states)
    precision = "fp32" if ts.precision == "fp32" else "bf16-mixed"
    if getattr(a, "hf_config", None) and ts.recompute == "none":
        from labkit.predict.step_inputs import hf_step_shape
        from labkit.shapes.hf_config import from_config, resolve

        spec = from_config(resolve(a.hf_config))
        step = hf_step_shape(spec, ts.micro_batch, ts.seq_len, precision, torch_name(ts.attention), False,
                             None, "cuda")
        source = "transformers' implementation (labkit.predict.activation_options), cache off"
    else:
        outside = est.per_device_bytes["activations"] - est.activations_per_layer_bytes * est.layers_per_device
        step = step_shape(ts, est.activations_per_layer_bytes, outside)
        source = "Korthikanti et al.'s terms (labkit.predict.estimate)"
    peak = step_peak(step, reserve_share())
    return {"bytes": peak.peak, "phase": peak.phase, "by_phase": peak.by_phase, "activations_from": source,
            "terms": {t.name: t.bytes for t in peak.phases[peak.phase] if t.bytes},
            "reserve_bytes": peak.reserve.bytes, "optimizer": "the lab's AdamW (single-tensor"
            + ("" if precision == "fp32" else "; fp32 master weights in mixed precision") + ")"}


def _sharded(ts: TrainingSetup, est: MemoryEstimate, states: dict[str, float] | None = None) -> dict[str, Any]:
    """One GPU's predicted step peak for a sharded layout: the memory model's states and activations per GPU
    (ZeRO, Rajbhandari et al. 2020; Korthikanti et al. 2022) and the step's transients, split as the layout
    splits them; the lab's AdamW over this GPU's shard."""
    pd = dict(est.per_device_bytes)
    if states:  # the convention's states; any extra buffer (ZeRO-3's gather buffer) counted with the parameters
        extra = sum(v for k, v in states.items() if k not in ("parameters", "gradients", "optimizer"))
        pd |= {k: states.get(k, 0.0) for k in ("gradients", "optimizer")}
        pd["parameters"] = states.get("parameters", 0.0) + extra
    precision = "fp32" if ts.precision == "fp32" else "bf16-mixed"
    shard = est.params / (ts.tp * ts.pp * (ts.dp if ts.zero_stage >= 1 else 1))
    step = ShardedStep(ts.shape, ts.micro_batch, ts.seq_len, pd["parameters"], pd["gradients"], pd["optimizer"],
                       pd["activations"], ts.tp, ts.pp, 1, ts.sp, precision, "lab", shard)
    peak = sharded_peak(step, reserve_share())
    return {"bytes": peak.peak, "phase": peak.phase, "by_phase": peak.by_phase,
            "activations_from": "Korthikanti et al.'s terms per GPU (labkit.predict.estimate), sharded",
            "terms": {t.name: t.bytes for t in peak.phases[peak.phase] if t.bytes},
            "reserve_bytes": peak.reserve.bytes, "optimizer": "the lab's AdamW over this GPU's shard "
            f"({shard:,.0f} parameters{'' if precision == 'fp32' else '; fp32 master weights in mixed precision'})"}


def step_time(a: argparse.Namespace, ts: TrainingSetup | None, device) -> dict[str, Any] | None:
    """The step's seconds from the kernel model on the datasheet's ``device`` and, with ``--calibration``, on
    the calibrated one (``labkit.predict.step_seconds``); None without a shape, a GPU or for a sharded layout."""
    if ts is None or device is None or ts.tp * ts.pp != 1:
        return None
    from labkit.cli.calibrate import load_calibration
    from labkit.predict.step_seconds import calibrated_step_seconds, lab_master_weights, step_seconds

    dtype = "fp32" if ts.precision == "fp32" else "bf16"
    master = lab_master_weights(ts.precision)
    out = {"datasheet": step_seconds(ts.shape, ts.seq_len, ts.micro_batch, device, dtype, ts.attention,
                                     master_weights=master)["total"], "framework": "eager"}
    cal = load_calibration(getattr(a, "calibration", None))
    if cal is not None:
        out["calibrated"] = calibrated_step_seconds(ts.shape, ts.seq_len, ts.micro_batch, device, cal, ts.attention,
                                                    master, dtype)
        out["calibration"] = f"{cal.machine}, {cal.date}"
    return out


def peak_lines(out: dict[str, Any], unit: float, u: str) -> list[str]:
    """The peak and the verdict for people: phase, the terms alive at the peak, the margin, the fit."""
    pk, lines = out.get("step_peak"), []
    if pk is not None:
        phases = ", ".join(f"{k} {v / unit:,.2f}" for k, v in pk["by_phase"].items())
        terms = ", ".join(f"{k} {v / unit:,.2f}" for k, v in pk["terms"].items())
        lines += [f"whole-step peak (predicted): {pk['bytes'] / unit:,.2f} {u} in the {pk['phase']} phase "
                  f"({phases})", f"  at the peak: {terms}", f"  activations from {pk['activations_from']}; "
                  f"optimizer: {pk['optimizer']}"]
        if pk["reserve_bytes"]:
            lines.append(f"  caching allocator's margin: {pk['reserve_bytes'] / unit:,.2f} {u} beyond the peak "
                         "(the largest reserve measured on the H200, as a share of the peak)")
    if "gpu" in out:
        where = (f"{out['gpu']} ({out['capacity']} capacity: {out['device_bytes'] / 2**30:.1f} GiB = "
                 f"{out['device_bytes'] / 1e9:.1f} GB)")
        if out["usable_bytes"] != out["device_bytes"]:
            measured = "measured" if not out["usable_source"].startswith("rule") else "by the catalogue's rule"
            lines.append(f"usable by torch: {out['usable_bytes'] / unit:,.2f} {u} ({measured}; the margin below "
                         f"is judged on it)")
        gap = abs(out["headroom_bytes"]) / unit
        judged = f"judged on the {out['judged_on']}"
        lines.append(f"fits on {where}: yes, {gap:,.1f} {u} to spare ({judged})" if out["fits"] else
                     f"does not fit on {where}: short by {gap:,.1f} {u} ({judged})")
        st = out.get("step_time")
        if st:
            lines.append(f"step time (kernel model, {st['framework']} profile, one micro-batch): "
                         f"{st['datasheet'] * 1e3:,.1f} ms on the datasheet"
                         + (f", {st['calibrated'] * 1e3:,.1f} ms on the calibration of {st['calibration']}"
                            if "calibrated" in st else ""))
        if out["fits"] and pk is not None and out["headroom_bytes"] < pk["reserve_bytes"]:
            lines.append("  tight: inside the capacity but not the allocator's margin (the allocator frees its "
                         "cache and retries before it fails; PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True helps)")
    return lines
