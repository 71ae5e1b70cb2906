"""What a plan takes from its framework profile, said out loud, and one flag to override each assumption.

A profile (``labkit.predict.profiles``) is named for a framework and a year, so it carries that
framework's kernels and overlaps: ``megatron-2021`` writes attention out and has no sequence
parallelism or fused gradient accumulation (Narayanan et al., SC 2021, section 4.2), ``megatron-te``
runs Transformer Engine's fused attention with sequence parallelism and overlaps its collectives
(Megatron-Core documentation). ``labkit advise`` prints every assumption the plan took from the profile
(:func:`lines`) and lets the user change any one of them with its own flag (``OVERRIDES``), without
inventing a new profile; the attention kernel and sequence parallelism are layout fields, overridden by
``--attention`` and ``--sp``.
"""

from __future__ import annotations

import math
from dataclasses import replace

from labkit.errors import LabkitError
from labkit.predict.profiles import GRAD_ACCUM_BYTES, Profile

ON_OFF = ("on", "off")
# Profile field -> (command-line flag, what it assumes when on)
OVERRIDES: dict[str, tuple[str, str]] = {
    "grad_accum_bytes": ("grad-accum-fusion", "weight-gradient GEMM accumulates into fp32 main_grad (off: a "
                                              f"separate {GRAD_ACCUM_BYTES} B/param pass per micro-batch)"),
    "overlap_dp": ("overlap-grad-reduce", "data-parallel gradient reduce overlapped with the backward"),
    "overlap_sharded": ("overlap-param-gather", "ZeRO-3/FSDP gathers and reduce-scatters prefetched behind compute"),
    "overlap_tp": ("tp-comm-overlap", "tensor-parallel collectives overlapped with the GEMMs"),
    "aggregate_ports": ("network-aggregation", "a data-parallel ring spanning hosts uses every port of a host"),
    "gemm_efficiency": ("gemm-efficiency", "share of the dense peak the GEMMs reach"),
    "exposed_share": ("exposed-share", "share of prefetched ZeRO-3/FSDP traffic that stays exposed"),
    "reuse_distance": ("reuse-distance", "parameters within which ZeRO-3 keeps a gathered module for its next use "
                                         "(DeepSpeed's stage3_max_reuse_distance; inf: kept from the recomputed "
                                         "forward to the backward)"),
}
FLAGS = {flag: field for field, (flag, _) in OVERRIDES.items()}
# the values a numeric override takes (the others are on, off): (what the help says, lowest, highest); only the
# exposed share may be the lowest itself
NUMERIC = {"gemm_efficiency": ("a share of the peak in (0, 1]", 0.0, 1.0),
           "exposed_share": ("a share in [0, 1]", 0.0, 1.0),
           "reuse_distance": ("a number of parameters > 0, or inf", 0.0, float("inf"))}
KIND = {field: text for field, (text, _, _) in NUMERIC.items()}


def _on(field: str, value: object) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text not in ON_OFF:
        raise LabkitError(f"{OVERRIDES[field][0].replace('-', '_')} must be one of on, off (got {value!r})")
    return text == "on"


def apply(prof: Profile, overrides: dict[str, object] | None) -> Profile:
    """``prof`` with the user's overrides (Profile field -> "on"/"off", or a number for the ``NUMERIC`` fields)."""
    changes: dict[str, object] = {}
    for field, value in (overrides or {}).items():
        if field not in OVERRIDES:
            raise LabkitError(f"override must be one of {', '.join(OVERRIDES)} (got {field!r})")
        if field in NUMERIC:
            text, low, high = NUMERIC[field]
            try:
                x = float(value)  # type: ignore[arg-type]
            except (TypeError, ValueError):
                x = math.nan
            ok = low <= x <= high and (x > low or field == "exposed_share")
            if not ok:
                raise LabkitError(f"{field} must be {text} (got {value!r})")
            changes[field] = x
        elif field == "grad_accum_bytes":
            changes[field] = 0.0 if _on(field, value) else float(GRAD_ACCUM_BYTES)
        else:
            changes[field] = _on(field, value)
    return replace(prof, **changes) if changes else prof


def kernel_defaults(prof: Profile) -> dict[str, object]:
    """The layout fields the profile decides unless the user names them: the attention kernel and sequence
    parallelism."""
    return {"attention": prof.attention, "sp": prof.sp}


def lines(prof: Profile, given: dict | None = None, overrides: dict | None = None) -> list[str]:
    """Every assumption the plan took from ``prof``, each with the flag that overrides it; ``given`` (the layout
    fields the user named) and ``overrides`` mark what the user set instead."""
    given, overrides = given or {}, overrides or {}

    def who(key: str) -> str:
        return "set by you" if key in given or key in overrides else f"from {prof.name}"

    def flag(b: bool) -> str:
        return "on" if b else "off"

    out = [f"attention {given.get('attention', prof.attention)} (--attention; {who('attention')})",
           f"sequence parallelism {flag(bool(given.get('sp', prof.sp)))} with tp > 1 (--sp; {who('sp')})",
           (f"kernels per layer {prof.kernels_per_layer}" if prof.counted is None else
            "ops per layer counted from the model's code (forward, backward)")
           + f" x {prof.launch_s * 1e6:g} us launch ({prof.label})"
           + (f"; the host's time per layer measured in bare ops (labkit.measure.host_time) x "
              f"{prof.dispatch_s * 1e6:g} us a bare op, overlapping them" if prof.counted is not None else
              f", {prof.dispatch_s * 1e6:g} us host dispatch each, overlapping them" if prof.dispatch_s else "")]
    for field, (name, what) in OVERRIDES.items():
        value = getattr(prof, field)
        if field in NUMERIC:
            shown = f"{value:.2f}" if value <= 1 else f"{value:g}"
        else:
            shown = flag(not value if field == "grad_accum_bytes" else bool(value))
        out.append(f"{what}: {shown} (--{name}; {who(field)})")
    return out
