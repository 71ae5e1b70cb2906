"""The capstone: a fixed cluster and budget, a plan the learner proposes, and the advisor's grade.

The task (:data:`GPT3_TASK`) is GPT-3 175B (Brown et al. 2020: 300 billion training tokens) on
1,024 H100-SXM GPUs (notebook 09 searches the same model on A100s before it, so the capstone's
answer is not on screen) with the global batch of 1,536 sequences of 2,048 tokens of Megatron-LM's
example configuration (``examples/pretrain_gpt3_175B.sh`` in NVIDIA/Megatron-LM: 128 nodes x 8
GPUs, tp 8, pp 16, micro-batch 1), rented at the catalogue's hourly price, with a budget in USD. The
grade judges the plan with the same rules and models as :func:`~labkit.advisor.search.advise`,
then compares its whole run (steps = tokens / (batch x seq)) with the advisor's fastest plan, and
names the largest actual difference, or says plainly that the learner's plan beats the advisor's
best (the advisor searches a finite set of layouts with a model accurate to about 10%, so a plan
outside that set, or within its error, can win): :func:`differences` sets the two plans' step-time breakdowns
side by side, term by term (with the recomputed forward split out of compute by its FLOPs,
``estimate.training_flops``), so the feedback points at what really separates the two plans.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from functools import lru_cache

from labkit.advisor import costing, search
from labkit.advisor.costing import Layout, Plan
from labkit.errors import LabkitError, require_positive
from labkit.hardware import GB
from labkit.predict.estimate import training_flops
from labkit.shapes import ModelShape, model_shape
from labkit.teach.journal import record

HINTS = {
    "memory": "shard more: ZeRO over dp, a larger tp inside the node or pp across nodes, recompute, or offload",
    "host-dram": "the host DRAM cannot hold the offloaded states: offload to NVMe or shard over more GPUs",
    "nvme": "the node's NVMe drives cannot hold the states: shard over more GPUs",
    "tp-heads": "tp must divide the attention heads",
    "tp-node": "keep tp inside one node, where NVLink carries its all-reduces",
    "pp-layers": "pp must divide the layers",
    "batch": "dp x micro-batch must divide the global batch",
    "zero-pipeline": "with pp > 1 use ZeRO-0 or ZeRO-1",
    "offload": "ZeRO-Offload runs on ZeRO-2, ZeRO-Infinity on ZeRO-3, with bf16 mixed precision and 32-bit Adam",
    "gpus": "dp x tp x pp must equal the GPU count",
}


@dataclass(frozen=True)
class Task:
    """What the learner is given: a model, a cluster, a batch, a token budget and a dollar budget."""

    model: str = "gpt3-175b"
    gpu: str = "H100-SXM"
    gpus: int = 1024
    global_batch: int = 1536
    seq: int = 2048
    tokens: float = 300e9
    budget_usd: float = 3.0e6

    @property
    def steps(self) -> float:
        return self.tokens / (self.global_batch * self.seq)


GPT3_TASK = Task()


@dataclass(frozen=True)
class Grade:
    """The learner's plan beside the advisor's best: truthy when it fits and stays within budget."""

    plan: Plan
    best: Plan
    task: Task
    feedback: str

    @property
    def run_usd(self) -> float:
        return self.plan.usd * self.task.steps

    @property
    def run_days(self) -> float:
        return self.plan.step_s * self.task.steps / 86400

    @property
    def time_ratio(self) -> float:
        """The plan's step time over the advisor's best (1 is the best; inf if infeasible)."""
        return self.plan.step_s / self.best.step_s

    @property
    def cost_ratio(self) -> float:
        return self.plan.usd / self.best.usd

    @property
    def within_budget(self) -> bool:
        return self.plan.feasible and self.run_usd <= self.task.budget_usd

    def __bool__(self) -> bool:
        return self.within_budget

    def __str__(self) -> str:
        return self.feedback

    def _repr_pretty_(self, p, cycle) -> None:
        p.text(self.feedback)


@lru_cache(maxsize=8)
def best_plan(task: Task = GPT3_TASK) -> Plan:
    """The advisor's fastest plan for the task (cached: the search is the same every time)."""
    a = search.advise(task.model, task.global_batch, task.gpu, task.gpus, "fastest", seq=task.seq)
    if a.best is None:
        raise LabkitError(f"task has no feasible plan: {task.model} on {task.gpus} x {task.gpu}")
    return a.best


def _layout(proposal: Layout | dict) -> Layout:
    if isinstance(proposal, Layout):
        return proposal
    if not isinstance(proposal, dict):
        raise LabkitError(f"plan must be a Layout or a dict of its fields (got {type(proposal).__name__})")
    allowed = [f.name for f in fields(Layout)]
    unknown = [k for k in proposal if k not in allowed]
    if unknown:
        raise LabkitError(f"plan field must be one of {', '.join(allowed)} (got {unknown[0]!r})")
    missing = [k for k in ("dp", "tp", "pp") if k not in proposal]
    if missing:
        raise LabkitError(f"plan must give dp, tp and pp (missing {', '.join(missing)})")
    return Layout(**proposal)


WHY = {  # what, in a layout, sets each term of the step time
    "compute": lambda p, b: ", ".join(x for x in (_pair(f, p, b) for f in ("precision", "micro_batch", "attention"))
                                      if x),
    "recompute": lambda p, b: _pair("recompute", p, b),
    "bubble": lambda p, b: (f"pp {p.pp} with m = {p.m} micro-batches against pp {b.pp} with m = {b.m}"
                            + _pair("schedule", p, b, ", ") + _pair("chunks", p, b, ", ")),
    "tp": lambda p, b: f"tp {p.tp} against {b.tp}" + _pair("micro_batch", p, b, ", "),
    "pp": lambda p, b: (f"pp {p.pp} against {b.pp}" if p.pp != b.pp else f"pp {p.pp} on both")
    + _pair("chunks", p, b, ", ") + _pair("tp", p, b, ", "),  # sends per micro-batch: 2 x chunks, of b s h / tp
    "dp": lambda p, b: f"dp {p.dp} with ZeRO-{p.zero} against dp {b.dp} with ZeRO-{b.zero}",
    "offload": lambda p, b: _pair("offload", p, b),
}


@dataclass(frozen=True)
class _Side:
    """The layout fields the WHY lines quote, for one plan."""

    dp: int
    tp: int
    pp: int
    m: int
    zero: int
    recompute: str
    offload: str
    precision: str
    micro_batch: int
    schedule: str
    chunks: int
    attention: str


def _side(plan: Plan) -> _Side:
    lay = plan.layout
    return _Side(lay.dp, lay.tp, lay.pp, plan.microbatches, lay.zero_stage, lay.recompute, lay.offload,
                 lay.precision, lay.micro_batch, lay.schedule, lay.chunks, lay.attention)


def _pair(field: str, p: _Side, b: _Side, sep: str = "") -> str:
    a, c = getattr(p, field), getattr(b, field)
    return "" if a == c else f"{sep}{field.replace('_', '-')} {a} against {c}"


def time_terms(plan: Plan, shape: ModelShape, seq: int, global_batch: int) -> dict[str, float]:
    """The plan's step time by term, with the recomputed forward split out of compute by its share of FLOPs."""
    times = dict(plan.times)
    if "recompute" not in times and plan.layout.recompute != "none":
        share = 1 - training_flops(shape, seq, global_batch) / training_flops(shape, seq, global_batch,
                                                                             plan.layout.recompute)
        times["recompute"] = times["compute"] * share
        times["compute"] -= times["recompute"]
    return times


def differences(plan: Plan, best: Plan, task: Task = GPT3_TASK) -> list[tuple[str, float, float]]:
    """(term, plan's seconds, best's seconds) for every term of the step time, largest excess first."""
    shape = model_shape(task.model)
    mine, theirs = (time_terms(p, shape, task.seq, task.global_batch) for p in (plan, best))
    terms = [(k, mine.get(k, 0.0), theirs.get(k, 0.0)) for k in dict.fromkeys([*mine, *theirs])]
    return sorted(terms, key=lambda t: (-(t[1] - t[2]), t[0]))


def _feedback(plan: Plan, best: Plan, task: Task) -> str:
    diffs = differences(plan, best, task)
    term, mine, theirs = diffs[0]
    if mine - theirs <= 1e-9 * max(plan.step_s, 1.0):
        return "No term of your step is longer than the advisor's best: your plan is as fast.\n"
    why = WHY.get(term, lambda p, b: "")(_side(plan), _side(best)).strip(", ")
    if not why:  # the term follows from the layout as a whole: name the fields that differ
        a, b = plan.layout, best.layout
        why = "your " + ", ".join(f"{f.name} {getattr(a, f.name)}" for f in fields(Layout)
                                  if getattr(a, f.name) != getattr(b, f.name)) + " against the best's " + \
            ", ".join(f"{getattr(b, f.name)}" for f in fields(Layout) if getattr(a, f.name) != getattr(b, f.name))
    text = (f"The largest difference from the advisor's best is {term}: {mine:.2f} s against {theirs:.2f} s a step "
            f"(+{mine - theirs:.2f} s)" + (f", from {why}" if why else "") + ".\n")
    rest = [f"{k} {a - b:+.2f} s" for k, a, b in diffs[1:] if abs(a - b) >= 0.005]
    return text + ("Then: " + ", ".join(rest) + ".\n" if rest else "")


def grade(proposal: Layout | dict, task: Task = GPT3_TASK) -> Grade:
    """Judge the learner's plan (a Layout or ``{"dp": 8, "tp": 8, "pp": 16, ...}``) for ``task``."""
    require_positive("budget_usd", task.budget_usd, integer=False)
    lay = _layout(proposal)
    shape = model_shape(task.model)
    mc = costing.machine(task.gpu, task.gpus)
    plan = search.evaluate(shape, task.seq, task.global_batch, lay, mc)
    best = best_plan(task)
    best_line = (f"The advisor's fastest: {best.layout.label}, {best.step_s:.2f} s a step, "
                 f"${best.usd * task.steps / 1e6:.2f}M for the run.")
    if not plan.feasible:
        text = f"Not feasible: {plan.reason}.\nHint: {HINTS.get(plan.rule, '')}.\n{best_line}"
        record("capstone", "09.capstone", asdict(lay), False, plan.reason, reason=plan.reason)
        return Grade(plan, best, task, text)
    g = Grade(plan, best, task, "")
    record("capstone", "09.capstone", asdict(lay), g.within_budget, time_ratio=g.time_ratio, run_usd=g.run_usd)
    verdict = "within" if g.within_budget else "over"
    text = (f"Feasible: {plan.memory_bytes / GB:.1f} GB per GPU; {plan.step_s:.2f} s a step, "
            f"{g.time_ratio:.2f}x the advisor's best; {g.run_days:.1f} days and ${g.run_usd / 1e6:.2f}M for "
            f"{task.tokens / 1e9:.0f} bn tokens: {verdict} the ${task.budget_usd / 1e6:.2f}M budget.\n")
    if plan.step_s < best.step_s * (1 - 1e-9):
        text += (f"You beat the advisor: your step is {100 * (1 - g.time_ratio):.1f}% shorter than its best plan's. "
                 f"The advisor did not rank your layout first (it searches a finite set, with a model accurate "
                 f"to about 10%), so yours is the better plan by its own model.\n")
        return Grade(plan, best, task, text + best_line)
    return Grade(plan, best, task, text + _feedback(plan, best, task) + best_line)
