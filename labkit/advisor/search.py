"""The advisor: every layout of a model on a cluster, the rules that rule layouts out, and the ranking.

``advise`` enumerates (dp, tp, pp) whose product is the GPU count, then micro-batch, ZeRO stage,
recompute, offload, precision and 8-bit Adam states, judges each with :func:`check` (the rules
below, then the memory) and prices the kept ones with ``costing``. Rules, each a published
constraint:

* tp divides the heads (Megatron splits attention by head) and stays inside a node, where the
  GPUs share NVLink: its all-reduces run twice per block and would crawl over the network;
* pp divides the layers (equal stages); dp x micro-batch divides the global batch;
* ZeRO stages 2 and 3 shard gradients, which a pipeline's gradient accumulation needs whole:
  DeepSpeed allows only stage 0 or 1 with pipeline parallelism (and so no offload either);
* ZeRO-Offload runs on ZeRO-2 and ZeRO-Infinity on ZeRO-3, both with mixed precision and 32-bit
  Adam on the CPU; their DRAM or NVMe must hold the states;
* the plan's bytes per GPU fit the GPU's usable memory.

Pruning keeps it fast: a rule that fails on the layout alone rejects it once (not once per
option), and the memory estimate is computed once per (layout, micro-batch, stage, recompute,
precision), offload and 8-bit states being corrections to it; ZeRO over a single data-parallel GPU
and option combinations no engine offers are skipped. GPT-3 175B on 1,024 GPUs: about 2,200 plans
judged in about 0.3 s.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from labkit.advisor import costing
from labkit.advisor.costing import GOALS, OFFLOAD_STAGE, OFFLOADS, Layout, Machine, Plan
from labkit.economics import energy
from labkit.errors import require_choice, require_positive
from labkit.estimate import RECOMPUTE
from labkit.hardware import GB
from labkit.shapes import ModelShape, model_shape

MICRO_BATCHES = (1, 2, 4, 8)


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


RULES = ("gpus", "tp-heads", "tp-node", "pp-layers", "memory", "host-dram", "nvme", "batch", "zero-pipeline",
         "offload")


def layout_problem(shape: ModelShape, lay: Layout, mc: Machine) -> tuple[str, str]:
    """(rule, why) a layout cannot be built at all, whatever its options; ("", "") when it can."""
    node, name = mc.cluster.gpus_per_node, "NVLink" if mc.cluster.device.nvlink else "PCIe"
    if lay.gpus != mc.cluster.n_gpus:
        return "gpus", f"dp x tp x pp = {lay.gpus}, not the {mc.cluster.n_gpus} GPUs of the cluster"
    if shape.heads % lay.tp:
        return "tp-heads", f"tp={lay.tp} does not divide the {shape.heads} attention heads"
    if lay.tp > node:
        return "tp-node", f"tp={lay.tp} crosses the {node}-GPU {name} domain of a node"
    if shape.layers % lay.pp:
        return "pp-layers", f"pp={lay.pp} does not divide the {shape.layers} layers"
    return "", ""


def option_problem(lay: Layout) -> tuple[str, str]:
    """(rule, why) the engines do not offer this combination of options; ("", "") when they do."""
    if lay.pp > 1 and lay.zero_stage >= 2:
        return "zero-pipeline", (f"ZeRO-{lay.zero_stage} shards gradients, which pipeline parallelism "
                                 f"(pp={lay.pp}) needs whole")
    if lay.offload != "none":
        if lay.zero_stage != OFFLOAD_STAGE[lay.offload]:
            return "offload", (f"offload to {lay.offload} runs on ZeRO-{OFFLOAD_STAGE[lay.offload]} "
                               f"(got ZeRO-{lay.zero_stage})")
        if lay.precision != "bf16-mixed" or lay.optimizer_bits != 32:
            return "offload", f"offload to {lay.offload} keeps 16-bit weights and 32-bit Adam on the CPU"
    return "", ""


def _memory_problems(mem: dict[str, float], mc: Machine) -> list[tuple[str, str]]:
    usable, node, out = mc.usable_bytes, mc.cluster.gpus_per_node, []
    if mem["total"] > usable:
        out.append(("memory", f"needs {mem['total'] / GB:,.1f} GB per GPU, holds {usable / GB:,.1f} "
                              f"({100 * mc.usable_fraction:.0f}% of {mc.cluster.device.memory_bytes / GB:.0f} GB)"))
    dram = mc.host.sockets * mc.dram.capacity_bytes
    if mem["dram"] * node > dram:
        out.append(("host-dram", f"needs {mem['dram'] * node / GB:,.0f} GB of host DRAM per node, "
                                 f"has {dram / GB:,.0f}"))
    nvme = mc.ssds_per_server * mc.ssd.capacity_bytes
    if mem["nvme"] * node > nvme:
        out.append(("nvme", f"needs {mem['nvme'] * node / GB:,.0f} GB of NVMe per node, has {nvme / GB:,.0f}"))
    return out


def evaluate(shape: ModelShape, seq: int, global_batch: int, lay: Layout, mc: Machine) -> Plan:
    """Judge one layout: rejected with every rule it breaks (memory first), or kept with its time, cost, carbon."""
    rule, why = layout_problem(shape, lay, mc)
    if rule:
        return Plan(lay, False, why, rule)
    m = max(1, global_batch // (lay.dp * lay.micro_batch))
    mem = costing.memory(shape, seq, lay, m)
    problems = _memory_problems(mem, mc)
    if global_batch % (lay.dp * lay.micro_batch):
        problems.append(("batch", f"global batch {global_batch} does not split into dp={lay.dp} x "
                                  f"micro-batch {lay.micro_batch}"))
    if option_problem(lay)[0]:
        problems.append(option_problem(lay))
    if problems:
        return Plan(lay, False, "; ".join(w for _, w in problems), problems[0][0], m, mem, mc.usable_bytes)
    t = costing.step_times(shape, seq, global_batch, lay, mc)
    step, usd, joules, kg = costing.price(shape, global_batch, lay, mc, t, mem["activations"])
    why = f"fits with {(mc.usable_bytes - mem['total']) / GB:,.1f} GB to spare; step {step:,.4g} s"
    return Plan(lay, True, why, "", m, mem, mc.usable_bytes, {k: t[k] for k in costing.TIMES}, step, usd, joules, kg)


def layouts(n_gpus: int, global_batch: int) -> list[tuple[int, int, int, int]]:
    """(dp, tp, pp, micro-batch) with dp x tp x pp = n_gpus and micro-batches of 1 to 8."""
    out = []
    for tp in _divisors(n_gpus):
        for pp in _divisors(n_gpus // tp):
            dp = n_gpus // (tp * pp)
            out += [(dp, tp, pp, b) for b in MICRO_BATCHES if global_batch % (dp * b) == 0] or [(dp, tp, pp, 1)]
    return out


def _options() -> list[tuple[int, str, str, str, int]]:
    """(stage, recompute, offload, precision, bits), without the combinations no engine offers."""
    out = []
    for stage, rec, off, prec, bits in itertools.product(range(4), RECOMPUTE, OFFLOADS, costing.PLAN_PRECISIONS,
                                                         costing.OPTIMIZER_BITS):
        if not option_problem(Layout(1, 1, 1, 1, stage, rec, off, prec, bits))[0]:
            out.append((stage, rec, off, prec, bits))
    return out


@dataclass(frozen=True)
class Advice:
    """The ranked plans of one search: ``kept`` best first for ``goal``, ``rejected`` with their reasons."""

    model: str
    gpu: str
    gpus: int
    global_batch: int
    seq: int
    goal: str
    kept: tuple[Plan, ...]
    rejected: tuple[Plan, ...]

    @property
    def best(self) -> Plan | None:
        return self.kept[0] if self.kept else None

    def find(self, **fields) -> Plan | None:
        """The judged plan whose layout has these fields (``dp=8, tp=8, pp=16, recompute="full"``...)."""
        for p in (*self.kept, *self.rejected):
            if all(getattr(p.layout, k) == v for k, v in fields.items()):
                return p
        return None

    def reasons(self) -> dict[str, int]:
        """How many plans each rule rejected (the first rule a plan breaks), most first."""
        counts: dict[str, int] = {}
        for p in self.rejected:
            counts[p.rule] = counts.get(p.rule, 0) + 1
        return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def advise(model: str | ModelShape, global_batch: int, gpu: str = "A100-80GB", gpus: int = 8, goal: str = "fastest",
           seq: int = 0, gpus_per_node: int = 8, machine: Machine | None = None) -> Advice:
    """Search every plan of ``model`` on ``gpus`` GPUs for ``goal`` (fit, fastest, cheapest, greenest).

    ``fit`` ranks by memory per GPU (most room first), the others by step seconds, USD and kg CO2 per
    step. With every plan on the same GPU count at one hourly price, ``cheapest`` follows ``fastest``;
    ``greenest`` differs, because a stalled GPU draws less than a computing one.
    """
    require_choice("goal", goal, GOALS)
    require_positive("global_batch", global_batch)
    shape = model if isinstance(model, ModelShape) else model_shape(model)
    seq = seq or shape.seq
    require_positive("seq", seq)
    mc = machine or costing.machine(gpu, gpus, gpus_per_node)
    if goal == "greenest":
        energy.gpu_memory_j_per_bit(mc.cluster.device)  # names the GPUs with energy figures
    kept, rejected = [], []
    options = _options()
    for dp, tp, pp, b in layouts(mc.cluster.n_gpus, global_batch):
        first = Layout(dp, tp, pp, b)
        rule, why = layout_problem(shape, first, mc)
        if rule:
            rejected.append(Plan(first, False, why, rule))
            continue
        for stage, rec, off, prec, bits in options:
            lay = Layout(dp, tp, pp, b, stage, rec, off, prec, bits)
            if option_problem(lay)[0] or (dp == 1 and 0 < stage and off == "none"):
                continue  # engines do not offer it, or ZeRO over one GPU: the same as stage 0
            plan = evaluate(shape, seq, global_batch, lay, mc)
            (kept if plan.feasible else rejected).append(plan)
    kept.sort(key=lambda p: (p.metric(goal), p.step_s, p.layout.label))
    return Advice(shape.name, mc.cluster.device.name, mc.cluster.n_gpus, global_batch, seq, goal, tuple(kept),
                  tuple(rejected))
