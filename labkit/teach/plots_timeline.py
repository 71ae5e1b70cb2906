"""The step's memory timeline as a picture: bytes alive by category over one step, phases and layers marked.

Draws ``labkit.measure.timeline.Timeline`` as a stacked area (parameters at the bottom, then gradients,
optimizer states, activations, temporaries), the forward / backward / optimizer phases shaded and named,
and the layers ticked along the top. Returns a ``Figure``; never calls ``plt.show``. Bytes in MB (1e6)
or GB (1e9), as the axis says.
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from labkit.measure.timeline import CATEGORIES, Timeline
from labkit.teach.plots import CATEGORY_COLORS

COLORS = {c: CATEGORY_COLORS["optimizer" if c == "optimizer states" else c] for c in CATEGORIES}
STACK = ("parameters", "optimizer states", "gradients", "activations", "temporaries")  # the states at the bottom
SHADE = {"forward": "#f2f2f2", "backward": "#e6eef7", "optimizer": "#f7ebe6"}


def _unit(peak: int) -> tuple[float, str]:
    return (1e9, "GB") if peak >= 1e9 else (1e6, "MB")


def draw_timeline(ax: Axes, tl: Timeline, title: str = "", unit: tuple[float, str] | None = None,
                  layer_ticks: int = 8) -> None:
    """One timeline on ``ax``: stacked categories, phases shaded, every n-th layer named along the top."""
    scale, name = unit or _unit(tl.peak)
    x = range(tl.events)
    ax.stackplot(x, *[[b / scale for b in tl.alive[c]] for c in STACK], labels=STACK,
                 colors=[COLORS[c] for c in STACK], linewidth=0)
    bounds = [*tl.phases, ("", tl.events)]
    for (phase, start), (_, end) in zip(bounds, bounds[1:], strict=False):
        if phase in SHADE:
            ax.axvspan(start, end, color=SHADE[phase], zorder=-1)
            ax.text((start + end) / 2, 1.0, phase, transform=ax.get_xaxis_transform(), ha="center", va="bottom",
                    fontsize=8)
    step = max(1, len(tl.layers) // layer_ticks)
    for label, i in tl.layers[::step]:
        ax.axvline(i, color="#999999", linewidth=0.4, zorder=0)
        ax.text(i, 0.01, label.removeprefix("layer "), transform=ax.get_xaxis_transform(), fontsize=6,
                color="#555555")
    ax.axhline(tl.peak / scale, color="black", linewidth=0.6, linestyle="--")
    ax.set_xlim(0, max(tl.events - 1, 1))
    ax.set_xlabel("event (a storage created or freed)")
    ax.set_ylabel(f"bytes alive ({name})")
    ax.set_title(title or f"one step's memory (peak {tl.peak / scale:,.2f} {name}, {tl.peak_phase})", fontsize=9,
                 pad=14)


def timeline_plot(tl: Timeline, title: str = "") -> Figure:
    """One step's timeline in one figure, with its legend."""
    fig, ax = plt.subplots(figsize=(8, 3.6))
    draw_timeline(ax, tl, title)
    ax.legend(loc="upper left", fontsize=7, frameon=False)
    fig.tight_layout()
    plt.close(fig)  # returned, not left open: a notebook would otherwise show it twice (as plots.py does)
    return fig


def timelines_side_by_side(tls: Sequence[Timeline], titles: Sequence[str]) -> Figure:
    """Several steps' timelines on one y scale (no recompute beside full and selective recompute, say)."""
    peak = max(t.peak for t in tls)
    unit = _unit(peak)
    fig, axes = plt.subplots(1, len(tls), figsize=(4 * len(tls), 3.4), sharey=True)
    for ax, tl, title in zip(list(axes) if len(tls) > 1 else [axes], tls, titles, strict=True):
        draw_timeline(ax, tl, f"{title}: peak {tl.peak / unit[0]:,.2f} {unit[1]}", unit)
        ax.set_ylim(0, peak / unit[0] * 1.08)
    fig.axes[0].legend(loc="upper left", fontsize=7, frameon=False)
    fig.tight_layout()
    plt.close(fig)
    return fig
