"""The advisor: every layout of a model on a cluster, the rules that rule layouts out, and the ranking.

``advise`` enumerates (dp, tp, pp, cp) whose product is the GPU count (context parallelism cp in
``CP_DEGREES`` = 1, 2, 4, 8 from ``CP_FROM_SEQ`` = 8,192 positions on, else 1), then micro-batch, ZeRO stage,
recompute, offload, precision and 8-bit Adam states, judges each with the rules of ``rules``
(then the memory) and prices the kept ones with ``costing``.
The rules, each a published constraint:

* tp divides the heads (Megatron splits attention by head) and stays inside a node, where the
  GPUs share NVLink: its all-reduces run twice per block and would crawl over the network;
* pp divides the layers (equal stages); dp x micro-batch divides the global batch;
* cp splits the sequence into 2 x cp equal chunks (Megatron's causal load balance) and runs the fused
  attention kernel (the ring is Transformer Engine's); ZeRO shards over dp x cp GPUs;
* ZeRO stages 2 and 3 shard gradients, which a pipeline's gradient accumulation needs whole:
  DeepSpeed allows only stage 0 or 1 with pipeline parallelism (and so no offload either);
* ZeRO-Offload runs on ZeRO-2 (DeepSpeed also offloads the optimizer to the CPU on ZeRO-3) and
  ZeRO-Infinity on ZeRO-3, all with mixed precision and 32-bit Adam on the CPU;
* the interleaved schedule needs its chunks to divide a stage's layers and the micro-batches to be
  a multiple of pp (Megatron-LM);
* the plan's bytes per GPU fit the GPU's memory less the headroom (``machine``), and what it
  offloads fits the host it runs on: DRAM and NVMe drives of the catalogue's host.

Pruning keeps it fast: a rule that fails on the layout alone rejects it once (not once per
option), and the memory estimate is computed once per (layout, micro-batch, stage, recompute,
precision), offload and 8-bit states being corrections to it; ZeRO over a single data-parallel GPU
and option combinations no engine offers are skipped. GPT-3 175B on 1,024 GPUs: about 2,200 plans
judged in about 0.3 s.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace

from labkit import hardware
from labkit.advisor import assumptions, costing, footprint, pricing
from labkit.advisor.costing import GOALS, OFFLOADS, Layout, Machine, Plan
from labkit.advisor.misses import gap
from labkit.advisor.refine import TIE_WITHIN, simpler_first, valid_extras, variants
from labkit.advisor.rules import FIT_RULES, layout_problem, memory_problems, option_problem, shortfall
from labkit.errors import LabkitError, divisors, require_choice, require_limit, require_positive
from labkit.hardware import GB
from labkit.predict import attention as attn
from labkit.predict.estimate import RECOMPUTE
from labkit.predict.profiles import DEFAULT_FRAMEWORK
from labkit.shapes import ModelShape, model_shape

MICRO_BATCHES = (1, 2, 4, 8)
# torchtitan's op-level policy ("op", labkit.predict.op_recompute) is priced when a layout names it, not searched
SEARCHED_RECOMPUTE = tuple(r for r in RECOMPUTE if r != "op")
SEARCHED = ("dp", "tp", "pp", "micro_batch", "zero_stage", "recompute", "offload", "precision", "optimizer_bits")
# searched around the best plans (``variants``) unless the caller fixes them; the stage split only when given
FIXED_ONLY = ("schedule", "chunks", "sp", "attention", "first_stage_layers", "last_stage_layers")
# Plans within 3% of the best are shown as ties (``refine.TIE_WITHIN``): the step-time model matches published runs
# to about 10-15% (Narayanan et al., SC 2021, Table 1, ``reference_sets``), so a smaller gap is not a ranking.
# context parallelism is searched from this sequence length on (Megatron-Core's documentation recommends it for
# long sequences, where activations grow with s), over these degrees (each dividing the GPUs, seq in 2 cp chunks)
CP_FROM_SEQ = 8192
CP_DEGREES = (1, 2, 4, 8)
REFINED = 24  # the best plans around which schedule, chunks, sequence parallelism and attention are searched


def _divisors(n: int) -> list[int]:
    return divisors(n)  # O(sqrt n)


def evaluate(shape: ModelShape, seq: int, global_batch: int, lay: Layout, mc: Machine, priced: bool = False) -> Plan:
    """Judge one layout: rejected with every rule it breaks (memory first), or kept with its time, cost, carbon.

    ``priced`` times and prices a rejected layout too (``feasible`` stays False, with the reason): a layout
    the caller gave is always priced, so they see what it would cost if it fitted."""
    rule, why = layout_problem(shape, lay, mc, seq)
    if rule:
        return Plan(lay, False, why, rule)
    m = costing.microbatches(global_batch, lay)
    mem = footprint.memory(shape, seq, lay, m)
    problems = memory_problems(mem, mc)
    if global_batch % (lay.dp * lay.micro_batch):
        problems.append(("batch", f"global batch {global_batch} does not split into dp={lay.dp} x "
                                  f"micro-batch {lay.micro_batch}"))
    elif lay.schedule == "interleaved" and m % lay.pp:
        problems.append(("schedule", f"the interleaved schedule needs the {m} micro-batches to be a multiple of "
                                     f"pp={lay.pp} (Megatron-LM)"))
    uneven = sorted({n for n in lay.stage_layers(shape.layers) if n % lay.chunks})
    if lay.schedule == "interleaved" and uneven:
        problems.append(("schedule", f"chunks={lay.chunks} does not divide the {uneven[0]} layers of a pipeline "
                                     f"stage"))
    if option_problem(lay)[0]:
        problems.append(option_problem(lay))
    if problems and not priced:
        return Plan(lay, False, "; ".join(w for _, w in problems), problems[0][0], m, mem, mc.usable_bytes,
                    shortfall=shortfall(mem, mc))
    t = costing.step_times(shape, seq, global_batch, lay, mc)
    step, usd, joules, kg = pricing.price(shape, global_batch, lay, mc, t, mem["activations"])
    units = pricing.units(shape, seq, global_batch, lay, mc)
    if problems:
        return Plan(lay, False, "; ".join(w for _, w in problems), problems[0][0], m, mem, mc.usable_bytes,
                    {k: t[k] for k in costing.TIMES}, step, usd, joules, kg, pricing.usd_basis(mc),
                    pricing.energy_missing(mc), shortfall(mem, mc), **units)
    why = f"fits with {(mc.usable_bytes - mem['total']) / GB:,.1f} GB to spare; step {step:,.4g} s"
    return Plan(lay, True, why, "", m, mem, mc.usable_bytes, {k: t[k] for k in costing.TIMES}, step, usd, joules, kg,
                pricing.usd_basis(mc), pricing.energy_missing(mc), **units)


def layouts(n_gpus: int, global_batch: int, micro_batches: tuple[int, ...] = MICRO_BATCHES
            ) -> list[tuple[int, int, int, int]]:
    """(dp, tp, pp, micro-batch) with dp x tp x pp = n_gpus and micro-batches of 1 to 8 (or those given)."""
    out = []
    for tp in _divisors(n_gpus):
        for pp in _divisors(n_gpus // tp):
            dp = n_gpus // (tp * pp)
            out += ([(dp, tp, pp, b) for b in micro_batches if global_batch % (dp * b) == 0]
                    or [(dp, tp, pp, micro_batches[0] if len(micro_batches) == 1 else 1)])
    return out


def cp_degrees(n_gpus: int, seq: int, fixed: dict) -> tuple[int, ...]:
    """The context-parallel degrees searched: the caller's, else ``CP_DEGREES`` that divide the GPUs and split
    ``seq`` into 2 x cp chunks when ``seq >= CP_FROM_SEQ`` and the attention is fused, else 1 alone."""
    if "cp" in fixed:
        return (require_positive("cp", fixed["cp"]),)
    if seq < CP_FROM_SEQ or attn.attention_kind(fixed.get("attention", "fused")) == "explicit":
        return (1,)
    return tuple(c for c in CP_DEGREES if n_gpus % c == 0 and seq % (2 * c) == 0)


def _options(recompute: tuple[str, ...] = SEARCHED_RECOMPUTE) -> list[tuple[int, str, str, str, int]]:
    """(stage, recompute, offload, precision, bits), without the combinations no engine offers; ``recompute``
    the modes tried (``SEARCHED_RECOMPUTE``, or the one a caller fixed)."""
    out = []
    for stage, rec, off, prec, bits in itertools.product(range(4), recompute, OFFLOADS, costing.PLAN_PRECISIONS,
                                                         costing.OPTIMIZER_BITS):  # fp8 only when asked for
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
    exact: Plan | None = None  # the complete layout the caller gave, priced as given
    host: str = ""
    limits: str = ""  # the host's limits in words
    usd_basis: str = ""
    energy_note: str = ""
    headroom: float = costing.DEFAULT_HEADROOM
    gaps: tuple[tuple[Plan, str], ...] = ()  # when nothing fits: the nearest misses and what would close them
    framework: str = ""  # the profile every plan was priced under (``profiles``)
    assumptions: tuple[str, ...] = ()  # what the plans took from the profile, each with its flag (``assumptions``)

    def nearest_misses(self, k: int = 3) -> list[Plan]:
        """The ``k`` rejected plans closest to fitting (rules of size alone), smallest shortfall first."""
        near = sorted((p for p in self.rejected if p.rule in FIT_RULES), key=lambda p: (p.shortfall, p.layout.label))
        out: list[Plan] = []
        for p in near:  # one plan per distinct shortfall: micro-batch variants short by the same bytes add nothing
            if not any(q.rule == p.rule and q.reason == p.reason for q in out):
                out.append(p)
        return out[:k]

    def ties(self, within: float = TIE_WITHIN) -> list[Plan]:
        """The kept plans whose goal metric is within ``within`` (relative) of the best: no model is that exact."""
        if not self.kept:
            return []
        best = min(p.metric(self.goal) for p in self.kept)
        return [p for p in self.kept if p.metric(self.goal) <= best * (1 + within)]

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
           seq: int = 0, gpus_per_node: int | None = None, machine: Machine | None = None, host: str | None = None,
           headroom: float = costing.DEFAULT_HEADROOM, fixed: dict | None = None, framework: str | None = None,
           network: str | None = None, network_ports: int | None = None, calibration: object | None = None,
           overrides: dict | None = None) -> Advice:
    """Search every plan of ``model`` on ``gpus`` GPUs for ``goal`` (fit, fastest, cheapest, greenest).

    ``fit`` answers "does it fit, and the fastest plan that does" (step seconds), the others rank by step
    seconds, USD and kg CO2 per step; near-ties go to the simpler plan (:func:`simpler_first`). With every
    plan on the same GPU count at one hourly price, ``cheapest`` follows ``fastest``;
    ``greenest`` differs, because a stalled GPU draws less than a computing one, and needs the GPU's
    energy figures. ``fixed`` holds layout fields the caller chose (``{"tp": 8, "recompute": "full"}``):
    the search keeps them; with dp, tp and pp all fixed, that layout is also priced as given
    (``Advice.exact``). ``host``, ``headroom``, ``network``, ``network_ports`` and ``framework`` (a profile of
    ``profiles``) build the machine (``machine.machine``); ``overrides`` changes single assumptions of the
    profile (``assumptions.OVERRIDES``). The attention kernel and sequence parallelism not fixed are the
    profile's for the layout given; a profile that ``pins_kernels`` (megatron-2021) also keeps the search to them.
    """
    require_choice("goal", goal, GOALS)
    require_limit("global_batch", require_positive("global_batch", global_batch))
    require_limit("gpus", require_positive("gpus", gpus))
    shape = model if isinstance(model, ModelShape) else model_shape(model)
    seq = seq or shape.seq
    require_positive("seq", seq)
    mc = machine or costing.machine(gpu, gpus, gpus_per_node, network, host=host, headroom=headroom,
                                    network_ports=network_ports, framework=framework or DEFAULT_FRAMEWORK,
                                    calibration=calibration, overrides=overrides)
    if goal == "greenest" and pricing.energy_missing(mc):
        with_figures = [g.name for g in hardware.load_catalogue().gpus if g.memory_energy_j_per_bit is not None]
        raise LabkitError(f"goal greenest needs energy figures: {pricing.energy_missing(mc)}; GPUs with them: "
                          f"{', '.join(with_figures)}")
    fixed = dict(fixed or {})
    given = dict(fixed)
    kernels = assumptions.kernel_defaults(mc.profile)
    if mc.profile.pins_kernels:
        fixed = {**kernels, **fixed}
    unknown = sorted(set(fixed) - set(SEARCHED) - set(FIXED_ONLY) - {"cp"})
    if unknown:
        raise LabkitError(f"fixed must name layout fields ({', '.join(SEARCHED + ('cp',) + FIXED_ONLY)}) "
                          f"(got {unknown})")
    extras = {k: fixed[k] for k in FIXED_ONLY if k in fixed}
    exact = None
    if all(k in fixed for k in ("dp", "tp", "pp")):
        exact = evaluate(shape, seq, global_batch, Layout(**{**kernels, **fixed}), mc, priced=True)
    kept, rejected = [], []
    tried = (fixed["recompute"],) if fixed.get("recompute") in RECOMPUTE else SEARCHED_RECOMPUTE
    options = [o for o in _options(tried) if all(fixed.get(k, v) == v for k, v in zip(SEARCHED[4:], o, strict=True))
               and (o[3] != "fp8" or fixed.get("precision") == "fp8")]
    sizes = (fixed["micro_batch"],) if "micro_batch" in fixed else MICRO_BATCHES
    for cp, (dp, tp, pp, b) in ((c, d) for c in cp_degrees(mc.cluster.n_gpus, seq, fixed)
                                 for d in layouts(mc.cluster.n_gpus // c, global_batch, sizes)):
        if any(fixed.get(k, v) != v for k, v in (("dp", dp), ("tp", tp), ("pp", pp))):
            continue
        first = Layout(dp, tp, pp, b, **valid_extras(extras, pp), cp=cp)
        rule, why = layout_problem(shape, first, mc, seq)
        if rule:
            rejected.append(Plan(first, False, why, rule))
            continue
        for stage, rec, off, prec, bits in options:
            lay = replace(first, zero_stage=stage, recompute=rec, offload=off, precision=prec, optimizer_bits=bits)
            if option_problem(lay)[0] or (dp * cp == 1 and 0 < stage and off == "none" and "zero_stage" not in fixed):
                continue  # engines do not offer it, or ZeRO over one GPU (dp x cp = 1): the same as stage 0
            plan = evaluate(shape, seq, global_batch, lay, mc)
            (kept if plan.feasible else rejected).append(plan)
    seen = {p.layout for p in kept}
    for p in sorted(kept, key=lambda p: p.metric(goal))[:REFINED]:
        for lay in variants(shape, p.layout, fixed):
            if lay not in seen:
                seen.add(lay)
                plan = evaluate(shape, seq, global_batch, lay, mc)
                (kept if plan.feasible else rejected).append(plan)
    kept.sort(key=lambda p: (p.metric(goal), p.step_s, p.layout.label))
    kept = simpler_first(kept, goal)
    adv = Advice(shape.name, mc.cluster.device.name, mc.cluster.n_gpus, global_batch, seq, goal, tuple(kept),
                 tuple(rejected), exact, mc.host.name, mc.limits(), pricing.usd_basis(mc), pricing.energy_missing(mc),
                 mc.headroom)
    misses = [exact] if exact is not None and exact.rule in FIT_RULES else []
    misses += [] if kept else [p for p in adv.nearest_misses() if p is not exact]
    return replace(adv, gaps=tuple((p, gap(p, mc)) for p in misses), framework=mc.profile.name,
                   assumptions=tuple(assumptions.lines(mc.profile, given, overrides)))
