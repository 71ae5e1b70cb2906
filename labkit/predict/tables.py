"""Plain-text tables of predictions, for notebooks and the CLI alike (GB = 1e9 bytes)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from labkit.predict.estimate import MemoryEstimate

COLUMNS = ("parameters", "gradients", "optimizer", "activations", "total")


def text_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """Columns aligned to their widest cell; the first column left-aligned, the rest right."""
    cells = [[str(h) for h in headers], *[[str(c) for c in r] for r in rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = []
    for r in cells:
        padded = (c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True)))
        lines.append("  ".join(padded))
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def estimate_table(estimates: Mapping[str, MemoryEstimate]) -> str:
    """One row per estimate: GB per device by category, activation share, the whole-step peak where one GPU's step
    is predicted (``labkit.predict.step_peak``; "-" for a sharded layout), and the fit if known (judged on the peak
    where there is one, else on the total)."""
    rows = []
    for label, est in estimates.items():
        d = est.per_device_bytes
        fit = "" if est.fits is None else (
            f"fits ({est.headroom_bytes / 1e9:+.1f})" if est.fits else f"no ({est.headroom_bytes / 1e9:+.1f})"
        )
        peak = "-" if est.peak_bytes is None else f"{est.peak_bytes / 1e9:.1f}"
        rows.append([label, *(f"{d[c] / 1e9:.1f}" for c in COLUMNS), f"{100 * est.activation_share:.0f}%", peak,
                     fit])
    headers = ["per device, GB", "params", "grads", "optim", "activ", "total", "activ %", "step peak",
               "fit (GB spare)"]
    return text_table(headers, rows)
