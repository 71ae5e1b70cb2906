"""Figures the notebooks share: stacked memory bars, loss curves, failure rates.

Each function returns a matplotlib ``Figure`` and never calls ``plt.show``; the
notebook (or the widget panel) decides where it goes. Bytes are drawn in GB
(1e9 bytes), and the axis says so.
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import matplotlib.pyplot as plt
from matplotlib.figure import Figure

if TYPE_CHECKING:
    from labkit.sim import Timeline

CATEGORY_COLORS = {
    "parameters": "#4C72B0",
    "gradients": "#55A868",
    "optimizer": "#C44E52",
    "activations": "#DD8452",
    "temporaries": "#8172B3",
    "other": "#937860",
}
STACK = ("parameters", "gradients", "optimizer", "activations")


def memory_bars(
    bars: Mapping[str, Mapping[str, float]],
    capacity_bytes: float | None = None,
    capacity_label: str = "device memory",
    unit: float = 1e9,
    unit_name: str = "GB",
    title: str = "Memory per device",
    wrap: int | None = None,
) -> Figure:
    """One stacked bar per entry of ``bars`` ({label: {category: bytes}}), with a capacity line.

    ``wrap`` breaks each bar's label into lines of at most that many characters, so long
    labels stay readable side by side instead of running into each other.
    """
    fig, ax = plt.subplots(figsize=(max(4.0, 1.3 * len(bars) + 2), 3.6 + (0.5 if wrap else 0.0)))
    labels = list(bars)
    bottoms = [0.0] * len(labels)
    categories = [c for c in CATEGORY_COLORS if any(c in b for b in bars.values())]
    for cat in categories:
        heights = [bars[label].get(cat, 0.0) / unit for label in labels]
        ax.bar(labels, heights, bottom=bottoms, color=CATEGORY_COLORS[cat], label=cat)
        bottoms = [b + h for b, h in zip(bottoms, heights, strict=True)]
    if capacity_bytes is not None:
        ax.axhline(capacity_bytes / unit, color="black", linestyle="--", linewidth=1)
        ax.text(len(labels) - 0.5, capacity_bytes / unit, f" {capacity_label}", va="bottom", ha="right")
    ax.set_ylabel(f"{unit_name} ({'1e9' if unit == 1e9 else int(unit)} bytes)" if unit_name == "GB" else unit_name)
    ax.set_title(title)
    if wrap:
        ax.set_xticks(range(len(labels)), [textwrap.fill(label.strip(), wrap) for label in labels], fontsize=8)
    ax.legend(loc="upper left", fontsize=8, frameon=False)
    fig.tight_layout()
    plt.close(fig)
    return fig


def loss_curve(curves: Mapping[str, Sequence[float]], title: str = "Training loss (measured)") -> Figure:
    """Loss against step for one or more measured runs."""
    fig, ax = plt.subplots(figsize=(5.5, 3.2))
    for label, losses in curves.items():
        ax.plot(range(1, len(losses) + 1), losses, label=label)
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy (nats)")
    ax.set_title(title)
    if len(curves) > 1:
        ax.legend(frameon=False)
    fig.tight_layout()
    plt.close(fig)
    return fig


def measured_vs_predicted(rows: Mapping[str, tuple[float, float]], unit: float = 1e3,
                          unit_name: str = "KB (1e3 bytes)", title: str = "Layer 0, tensor by tensor") -> Figure:
    """Paired horizontal bars: measured beside predicted for each named term."""
    fig, ax = plt.subplots(figsize=(6.0, 0.32 * len(rows) + 1.2))
    names = list(rows)
    ys = range(len(names))
    ax.barh([y + 0.2 for y in ys], [rows[n][0] / unit for n in names], height=0.4, label="measured")
    ax.barh([y - 0.2 for y in ys], [rows[n][1] / unit for n in names], height=0.4, label="predicted")
    ax.set_yticks(list(ys), names, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel(unit_name)
    ax.set_title(title)
    ax.legend(frameon=False, fontsize=8)
    fig.tight_layout()
    plt.close(fig)
    return fig


def failures_per_day(gpu_counts: Sequence[int], rates: Mapping[str, Sequence[float]]) -> Figure:
    """Expected failures per day against GPU count, one line per published trace (log-log)."""
    fig, ax = plt.subplots(figsize=(5.5, 3.2))
    for label, ys in rates.items():
        ax.loglog(gpu_counts, ys, marker="o", label=label)
    ax.axhline(1.0, color="grey", linestyle=":", linewidth=1)
    ax.set_xlabel("GPUs in the job")
    ax.set_ylabel("expected failures per day")
    ax.set_title("A failure a day, somewhere")
    ax.legend(frameon=False, fontsize=8)
    fig.tight_layout()
    plt.close(fig)
    return fig


def gantt(timeline: Timeline, title: str = "Pipeline schedule (simulated)", time_unit: str = "s",
          streams: Sequence[str] | None = None) -> Figure:
    """One lane per stream of a ``labkit.sim.Timeline``: forward and backward boxes, idle left blank.

    Each box carries its micro-batch number when it is wide enough to read (and
    there are few enough boxes to label). ``streams`` picks the lanes (default: all).
    """
    from matplotlib.patches import Patch

    from labkit.errors import require_choice

    scale = {"s": 1.0, "ms": 1e3, "us": 1e6}[require_choice("time_unit", time_unit, ("s", "ms", "us"))]
    colors = {"F": "#4C72B0", "B": "#DD8452"}
    streams = list(timeline.streams if streams is None else streams)
    lane = {s: i for i, s in enumerate(streams)}
    fig, ax = plt.subplots(figsize=(8.0, 0.45 * len(streams) + 1.4))
    span = timeline.makespan * scale
    boxes: dict[tuple[str, str], list[tuple[float, float]]] = {}
    events = [e for e in timeline.events if e.stream in lane]
    for e in events:
        boxes.setdefault((e.stream, e.kind), []).append((e.start * scale, e.duration * scale))
    for (stream, kind), spans in boxes.items():  # one collection per lane and kind: fast for 10,000 boxes
        ax.broken_barh(spans, (lane[stream] - 0.4, 0.8), facecolors=colors.get(kind, "#8C8C8C"),
                       edgecolor="white", linewidth=0.5 if len(events) < 2000 else 0)
    if len(events) <= 400:
        for e in events:
            if "microbatch" in e.meta and e.duration * scale >= 0.012 * span:
                ax.text((e.start + e.duration / 2) * scale, lane[e.stream], str(e.meta["microbatch"]),
                        ha="center", va="center", fontsize=7, color="white")
    ax.set_yticks(range(len(streams)), streams, fontsize=8)
    ax.set_ylim(len(streams) - 0.5, -0.5)
    ax.set_xlim(0, span or 1.0)
    ax.set_xlabel(f"time ({time_unit})")
    ax.set_title(title)
    names = {"F": "forward", "B": "backward", "comm": "transfer"}
    shown = [k for k in names if any(e.kind == k for e in events)]
    if shown:
        handles = [Patch(color=colors.get(k, "#8C8C8C"), label=names[k]) for k in shown]
        # beside the lanes, right of the axes: above them it overprints a long title
        ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    fig.tight_layout()
    plt.close(fig)
    return fig


def mode_bars(rows: Mapping[str, tuple[float, float]], highlight: str | None = None,
              title: str = "Tensor-parallel modes (predicted)") -> Figure:
    """Two bar charts side by side: communication seconds and bytes held per device, one bar per mode."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(8.0, 3.0))
    labels = list(rows)
    colors = ["#C44E52" if label == highlight else "#4C72B0" for label in labels]
    left.bar(labels, [rows[k][0] * 1e3 for k in labels], color=colors)
    left.set_ylabel("communication (ms)")
    right.bar(labels, [rows[k][1] / 1e6 for k in labels], color=colors)
    right.set_ylabel("held per device (MB, 1e6 bytes)")
    for ax in (left, right):
        ax.tick_params(axis="x", labelrotation=30, labelsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    plt.close(fig)
    return fig


def line(series: Mapping[str, Sequence[float]], xlabel: str, ylabel: str, title: str,
         x: Sequence[float] | None = None) -> Figure:
    """One or more series against ``x`` (default: their index, a search's best score per generation, say)."""
    fig, ax = plt.subplots(figsize=(5.5, 3.2))
    for label, ys in series.items():
        ax.plot(range(len(ys)) if x is None else x, ys, marker="o", markersize=3, label=label)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    if len(series) > 1:
        ax.legend(frameon=False, fontsize=8)
    fig.tight_layout()
    plt.close(fig)
    return fig
