"""The seed's selection flow, answered for one search: each question with the answer the advisor computed.

The flow (section 3.4 of the seed) asks, in order: does the model fit one GPU with plain data
parallelism; do its model states fit once ZeRO-3 shards them over every GPU; does a ZeRO-only plan
(tp = pp = 1) fit with its activations; then, for the plan the advisor ranked first, did it take
ZeRO, tensor parallelism inside the NVLink node, a pipeline across nodes, recompute, offload,
8-bit Adam states, bf16 mixed precision. :func:`decisions` answers each question from the search
itself: the first three from the bytes per GPU the advisor computed (and ZeRO's 16 bytes per
parameter over N GPUs, ``estimate.model_state_bytes``), the others by setting the best plan that
uses the technique beside the best plan that does not, in the goal's own metric. So the answers
are the advisor's decisions, not a reading of the layout. :func:`draw` puts the questions in one
column and the answers beside them (orange: yes), so no arrow crosses another.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Callable
from dataclasses import dataclass

import matplotlib.pyplot as plt
from matplotlib.figure import Figure
from matplotlib.patches import FancyBboxPatch

from labkit.advisor.costing import Layout, Plan
from labkit.advisor.refine import TIE_WITHIN
from labkit.advisor.search import Advice
from labkit.hardware import GB
from labkit.predict.estimate import model_state_bytes
from labkit.shapes import ModelShape, model_shape

LIT, DIM, INK = "#e6550d", "#bdbdbd", "#636363"


@dataclass(frozen=True)
class Decision:
    """One question of the flow, the advisor's answer (None: not decidable here), and the numbers behind it."""

    key: str
    question: str
    answer: bool | None
    evidence: str


CHOICES: tuple[tuple[str, str, Callable[[Layout], bool], Callable[[Layout], str]], ...] = (
    ("zero", "ZeRO over the data-parallel GPUs?", lambda lay: lay.zero_stage > 0,
     lambda lay: f"ZeRO-{lay.zero_stage} over dp {lay.dp}"),
    ("tp", "tensor parallel inside the NVLink node?", lambda lay: lay.tp > 1, lambda lay: f"tp {lay.tp}"),
    ("pp", "a pipeline across nodes?", lambda lay: lay.pp > 1, lambda lay: f"pp {lay.pp}"),
    ("recompute", "recompute activations?", lambda lay: lay.recompute != "none",
     lambda lay: f"recompute {lay.recompute}"),
    ("offload", "offload states to DRAM or NVMe?", lambda lay: lay.offload != "none",
     lambda lay: f"offload to {lay.offload}"),
    ("adam8", "8-bit Adam states?", lambda lay: lay.optimizer_bits == 8, lambda lay: "8-bit Adam"),
    ("bf16", "bf16 mixed precision?", lambda lay: lay.precision == "bf16-mixed", lambda lay: lay.precision),
)
QUESTIONS = ("fits_one", "states_zero", "zero_only", *(c[0] for c in CHOICES))


def _value(plan: Plan, goal: str) -> str:
    v = plan.metric(goal)
    return {"fit": f"{v / GB:,.1f} GB per GPU", "fastest": f"{v:,.4g} s a step", "cheapest": f"${v:,.4g} a step",
            "greenest": f"{v:,.3g} kg CO2 a step"}[goal]


def _usable(advice: Advice) -> float:
    return max((p.usable_bytes for p in (*advice.kept, *advice.rejected)), default=0.0)


def _fit_questions(advice: Advice, shape: ModelShape) -> list[Decision]:
    usable, n = _usable(advice), advice.gpus
    plain = advice.find(dp=n, tp=1, pp=1, zero_stage=0, recompute="none", offload="none", precision="bf16-mixed",
                        optimizer_bits=32)
    need = plain.memory_bytes if plain is not None else math.inf
    one = Decision("fits_one", "does the model fit one GPU (plain data parallel)?",
                   None if plain is None else bool(need <= usable),
                   f"needs {need / GB:,.1f} GB per GPU at micro-batch {plain.layout.micro_batch}, "
                   f"a GPU holds {usable / GB:,.1f} GB usable" if plain is not None else "not judged")
    states = sum(model_state_bytes(shape.params, "bf16-mixed", 3, n).values())
    zero = Decision("states_zero", f"do the model states fit with ZeRO-3 over {n:,} GPU{'s' if n > 1 else ''}?",
                    bool(states <= usable), f"{states / GB:,.1f} GB of states per GPU (16 B/param / {n:,})")
    alone = [p for p in (*advice.kept, *advice.rejected) if p.layout.tp == p.layout.pp == 1
             and math.isfinite(p.memory_bytes)]
    kept = [p for p in advice.kept if p.layout.tp == p.layout.pp == 1]
    roomy = [p for p in alone if p.memory_bytes <= usable]
    if kept:
        text = f"best {kept[0].layout.label}, {_value(kept[0], advice.goal)}"
    elif roomy:
        text = f"{len(roomy)} fit in memory but break a rule, e.g. {roomy[0].layout.label}: {roomy[0].reason}"
    elif alone:
        least = min(alone, key=lambda p: p.memory_bytes)
        text = f"the smallest ({least.layout.label}) needs {least.memory_bytes / GB:,.1f} GB per GPU"
    else:
        text = "no such layout was judged"
    only = Decision("zero_only", "is there a valid plan with tp = pp = 1 (data parallel, ZeRO)?",
                    bool(kept) if alone or kept else None, text)
    return [one, zero, only]


def decisions(advice: Advice, shape: ModelShape | None = None) -> list[Decision]:
    """The flow's questions answered from ``advice``: fit questions from bytes, choices from the ranked plans."""
    shape = shape or model_shape(advice.model)
    out = _fit_questions(advice, shape)
    best = advice.best
    for key, question, uses, says in CHOICES:
        if best is None:
            out.append(Decision(key, question, None, "no plan fits"))
            continue
        other = next((p for p in advice.kept if uses(p.layout) != uses(best.layout)), None)
        mine = f"{says(best.layout)}: {_value(best, advice.goal)}" if uses(best.layout) else _value(best, advice.goal)
        alt = (f"best {'without' if uses(best.layout) else 'with'}: " +
               (_value(other, advice.goal) if other is not None else "none fits"))
        pair = sorted((other.metric(advice.goal), best.metric(advice.goal))) if other is not None else None
        if pair is not None and pair[1] <= pair[0] * (1 + TIE_WITHIN):  # refine.simpler_first's own rule
            alt += (f" (within {100 * TIE_WITHIN:.0f}%: a tie, which goes to the simpler plan: no 8-bit states or "
                    "offload, then fewer parallel dimensions, then a lower ZeRO stage)")
        out.append(Decision(key, question, uses(best.layout), f"{mine}; {alt}"))
    return out


def path(advice: Advice, shape: ModelShape | None = None) -> list[str]:
    """The questions the advisor answered yes, in the flow's order."""
    return [d.key for d in decisions(advice, shape) if d.answer]


def explain(advice: Advice, shape: ModelShape | None = None) -> str:
    """The flow in words, one line per question, with the advisor's answer and its numbers."""
    word = {True: "yes", False: "no", None: "-"}
    return "\n".join(f"{i}. {d.question} {word[d.answer]}: {d.evidence}"
                     for i, d in enumerate(decisions(advice, shape), start=1))


def _box(ax, x: float, y: float, w: float, text: str, lit: bool, question: bool) -> None:
    lines = textwrap.wrap(text, 44 if question else (74 if lit else 82))
    text = "\n".join(lines[:2]) + (" …" if len(lines) > 2 else "")  # the full text is in explain()
    ax.add_patch(FancyBboxPatch((x, y - 0.33), w, 0.66, zorder=3, boxstyle="round,pad=0.04",
                                facecolor="#fdd0a2" if lit else "white", edgecolor=LIT if lit else INK,
                                linewidth=2.0 if lit else 1.0, linestyle="-" if question or lit else ":"))
    ax.text(x + 0.12, y, text, ha="left", va="center", fontsize=8.5, zorder=4, fontweight="bold" if lit else "normal")


def draw(advice: Advice | None = None, title: str = "", shape: ModelShape | None = None) -> Figure:
    """Questions down the left, the advisor's answers beside them: orange where the answer is yes."""
    rows = decisions(advice, shape) if advice is not None else [
        Decision(k, q, None, "") for k, q in zip(QUESTIONS, _QUESTION_TEXT, strict=True)]
    fig = plt.figure(figsize=(12, 0.62 * len(rows) + 1.4))  # through pyplot, so a notebook shows it as an image
    plt.close(fig)
    ax = fig.add_subplot()
    ax.set_xlim(-0.1, 12.1)
    ax.set_ylim(-len(rows) + 0.5, 0.8)
    ax.axis("off")
    ax.text(0.1, 0.55, "question (in the seed's order)", fontsize=8.5, color=INK, va="center")
    ax.text(4.85, 0.55, "the advisor's answer, computed from its plans", fontsize=8.5, color=INK, va="center")
    for i, d in enumerate(rows):
        y = -i
        _box(ax, 0.0, y, 4.2, d.question, False, True)
        if i + 1 < len(rows):
            ax.annotate("", xy=(2.1, y - 0.69), xytext=(2.1, y - 0.33), zorder=1,
                        arrowprops={"arrowstyle": "-|>", "color": INK, "lw": 1.0})
        if d.answer is None and not d.evidence:
            continue
        ax.annotate("", xy=(4.75, y), xytext=(4.25, y), zorder=1,
                    arrowprops={"arrowstyle": "-|>", "color": LIT if d.answer else DIM, "lw": 2.0 if d.answer else 1.0})
        word = {True: "yes", False: "no", None: "-"}[d.answer]
        _box(ax, 4.8, y, 7.2, f"{word}: {d.evidence}", bool(d.answer), False)
    best = advice.best if advice is not None else None
    ax.set_title(title or (f"the advisor's plan: {best.layout.label}" if best else "how to choose a strategy"),
                 fontsize=10)
    return fig


_QUESTION_TEXT = ("does the model fit one GPU (plain data parallel)?", "do the model states fit with ZeRO-3?",
                  "is there a valid plan with tp = pp = 1 (data parallel, ZeRO)?", *(c[1] for c in CHOICES))
