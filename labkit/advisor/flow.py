"""The seed's selection flow as a decision diagram, with the path a plan takes through it lit up.

The flow (section 3.4 of the seed): if the model fits one GPU, data parallelism; if its states fit
once ZeRO shards them over the data-parallel GPUs, ZeRO; otherwise tensor parallelism inside a
node, where NVLink carries its per-layer all-reduces, and pipeline parallelism across nodes, where
only one activation per micro-batch crosses the slower link; if memory is still short, recompute,
then offload to DRAM or NVMe when the link keeps up; and in every case bf16 mixed precision, with
8-bit optimizer states when they help. :func:`path` reads that path off a plan's layout;
:func:`draw` draws the diagram with it highlighted (matplotlib boxes and arrows).
"""

from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.figure import Figure
from matplotlib.patches import FancyBboxPatch

from labkit.advisor.costing import Layout, Plan

NODES = {  # id: (text, x, y, is_question)
    "start": ("model, batch, cluster", 0.0, 10.0, False),
    "fits_one": ("does the model fit one GPU?", 0.0, 8.9, True),
    "dp": ("data parallel (DDP)", -3.2, 8.9, False),
    "fits_zero": ("do the states fit with ZeRO\nover the data-parallel GPUs?", 0.0, 7.6, True),
    "zero": ("data parallel + ZeRO-1/2/3", -3.2, 6.3, False),
    "tp": ("tensor parallel inside\nthe NVLink node", 2.0, 6.3, False),
    "pp": ("pipeline across nodes\n(PCIe / network)", 2.0, 5.0, False),
    "short": ("still short of memory?", 0.0, 3.8, True),
    "recompute": ("recompute:\nselective, then full", -2.6, 2.6, False),
    "offload": ("offload to DRAM, then NVMe,\nif the link keeps up", -2.6, 1.3, False),
    "precision": ("precision: bf16 mixed,\n8-bit Adam states", 2.0, 1.3, False),
    "plan": ("the plan", 2.0, 0.1, False),
}
EDGES = {  # (from, to): label
    ("start", "fits_one"): "", ("fits_one", "dp"): "yes", ("fits_one", "fits_zero"): "no",
    ("fits_zero", "zero"): "yes", ("fits_zero", "tp"): "no", ("fits_zero", "pp"): "no, tp = 1",
    ("tp", "pp"): "", ("tp", "short"): "", ("pp", "short"): "", ("zero", "short"): "",
    ("short", "recompute"): "yes", ("short", "offload"): "yes", ("short", "precision"): "no",
    ("recompute", "offload"): "", ("recompute", "precision"): "", ("offload", "precision"): "",
    ("dp", "precision"): "", ("precision", "plan"): "",
}
LIT, DIM = "#e6550d", "#bdbdbd"


def path(plan: Plan | Layout) -> list[str]:
    """The nodes a plan's layout passes through, from ``start`` to ``plan``."""
    lay = plan.layout if isinstance(plan, Plan) else plan
    out = ["start", "fits_one"]
    plain = lay.tp == lay.pp == 1 and lay.zero_stage == 0 and lay.offload == "none" and lay.recompute == "none"
    if plain:
        return [*out, "dp", "precision", "plan"]
    out.append("fits_zero")
    if lay.tp == lay.pp == 1:
        out.append("zero")
    else:
        out += (["tp"] if lay.tp > 1 else []) + (["pp"] if lay.pp > 1 else [])
    out.append("short")
    out += (["recompute"] if lay.recompute != "none" else []) + (["offload"] if lay.offload != "none" else [])
    return [*out, "precision", "plan"]


def explain(plan: Plan | Layout) -> str:
    """The path in words, one line per step, with the plan's own degrees."""
    lay = plan.layout if isinstance(plan, Plan) else plan
    words = {
        "fits_one": "the model does not fit one GPU" if path(lay)[2] != "dp" else "the model fits one GPU",
        "dp": f"data parallel over {lay.dp} GPUs",
        "zero": f"ZeRO-{lay.zero_stage} over dp={lay.dp}",
        "tp": f"tensor parallel tp={lay.tp} inside a node (sequence parallel on)" + (
            f", dp={lay.dp}" + (f" with ZeRO-{lay.zero_stage}" if lay.zero_stage else "") if lay.pp == 1 else ""),
        "pp": f"pipeline pp={lay.pp} across nodes, dp={lay.dp}" + (f" with ZeRO-{lay.zero_stage}"
                                                                    if lay.zero_stage else ""),
        "short": "still short?" + (" yes" if lay.recompute != "none" or lay.offload != "none" else " no"),
        "recompute": f"recompute {lay.recompute}",
        "offload": f"offload to {lay.offload}",
        "precision": f"{lay.precision}" + (", 8-bit Adam states" if lay.optimizer_bits == 8 else ""),
    }
    steps = [n for n in path(lay)[1:-1] if n != "fits_zero"]
    return "\n".join(f"{i}. {words[n]}" for i, n in enumerate(steps, start=1))


def draw(plan: Plan | Layout | None = None, title: str = "") -> Figure:
    """The decision diagram; with a plan, its path is drawn in orange and the rest in grey."""
    lit = path(plan) if plan is not None else []
    lit_edges = set(zip(lit, lit[1:], strict=False))
    fig = plt.figure(figsize=(8.5, 7.5))  # through pyplot, so a notebook shows it as an image
    plt.close(fig)
    ax = fig.add_subplot()
    ax.set_xlim(-5.0, 4.2)
    ax.set_ylim(-0.6, 10.7)
    ax.axis("off")
    for (a, b), label in EDGES.items():
        (_, xa, ya, _), (_, xb, yb, _) = NODES[a], NODES[b]
        on = (a, b) in lit_edges
        ax.annotate("", xy=(xb, yb), xytext=(xa, ya), zorder=1,
                    arrowprops={"arrowstyle": "-|>", "color": LIT if on else DIM, "lw": 2.6 if on else 1.0,
                                "shrinkA": 16, "shrinkB": 16, "connectionstyle": "arc3,rad=0.08"})
        if label:
            ax.text((xa + xb) / 2, (ya + yb) / 2, label, fontsize=8, color=LIT if on else "#636363",
                    ha="center", va="center", backgroundcolor="white", zorder=2)
    for node, (text, x, y, question) in NODES.items():
        on = node in lit
        box = FancyBboxPatch((x - 1.35, y - 0.38), 2.7, 0.76, zorder=3,
                             boxstyle="round,pad=0.05" if not question else "sawtooth,pad=0.05",
                             facecolor="#fdd0a2" if on else "white", edgecolor=LIT if on else "#636363",
                             linewidth=2.0 if on else 1.0)
        ax.add_patch(box)
        ax.text(x, y, text, ha="center", va="center", fontsize=8.5, zorder=4,
                fontweight="bold" if on else "normal")
    ax.set_title(title or (plan.layout.label if isinstance(plan, Plan) else "how to choose a strategy"),
                 fontsize=10)
    return fig
