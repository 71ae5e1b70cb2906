"""The checkpoint plan with least recompute that fits a memory budget, from a recorded trace.

Checkmate (Jain et al., MLSys 2020) solves rematerialisation as an integer program over
every tensor of the graph. Here the space is the simple one a transformer user chooses in:
which blocks to checkpoint, and how to group them into segments (Chen et al. 2016), each
segment keeping only its input. Over that space a dynamic programme is exact, so this is
Checkmate's question with a much smaller answer space, solved by hand (no library has it).

The peak model is read off one real step without recompute (``record_trace``):

* ``bw_peaks[j]``: torch's ``MemTracker`` peak while block j runs backward, in bytes of the
  whole step (parameters, optimizer states, gradients so far, activations, temporaries);
* ``stored[j]``: bytes block j saves for backward; ``inputs[j]``: its input's bytes.

Backward of block j is the same computation under any plan; only the activations it finds
alive differ. Without recompute they are the blocks below j in full, N_j = sum(stored[:j]).
Under a plan, if j lies in a segment starting at p, they are what the blocks below p keep,
K(<p), plus blocks p..j re-materialised: so the peak at j moves by K(<p) - N_p. The step's
other peak, the head's backward, moves by what the whole plan keeps less N_n.

Measured beside predicted (tests): exact where the peak block is stored; where it is recomputed
the real peak is a little lower (128 bytes at d_model 32, 1,024 at 64: under 0.05% of the step).
The trace sees whole blocks, not the order of frees and allocations inside one, which the
recomputation shifts slightly; the prediction errs on the safe side.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from torch.distributed._tools.mem_tracker import MemTracker, _ModState
from torch.utils.flop_counter import FlopCounterMode

from labkit.errors import LabkitError, require_positive
from labkit.measure import SavedTensorRecorder, peak_step_bytes
from labkit.measure.record import Record
from labkit.predict.tables import text_table
from labkit.reduction.recompute import RecomputePlan, apply_recompute, uniform_plan
from labkit.rig.train import TrainConfig, Trainer


@dataclass(frozen=True)
class LayerTrace:
    """Per-block bytes, peaks and recompute cost of one real step without recompute."""

    stored: tuple[int, ...]  # bytes each block saves for backward
    inputs: tuple[int, ...]  # bytes of each block's input (what a segment head keeps)
    bw_peaks: tuple[int, ...]  # step bytes at the peak of each block's backward
    head_peak: int  # step bytes at the peak outside the blocks' backward
    cost: tuple[int, ...]  # FLOPs of each block's forward: what recomputing it repeats

    @property
    def n_layer(self) -> int:
        return len(self.stored)


@dataclass(frozen=True)
class PlanChoice:
    """A plan with its predicted peak (bytes) and recompute cost (FLOPs) for a budget."""

    plan: RecomputePlan
    predicted_peak: int
    recompute_flops: int
    fits: bool


def record_trace(train: TrainConfig) -> LayerTrace:
    """Run real steps of ``train`` without recompute and read the per-block trace off them."""
    trainer = Trainer(train)
    model, blocks = trainer.model, list(trainer.model.h)
    trainer.step()  # optimizer states exist from here on
    x, y = trainer.data(1)
    inputs: dict[int, int] = {}

    def note_input(i: int, args: tuple) -> None:  # a pre-hook that returns None leaves the input alone
        inputs.setdefault(i, args[0].untyped_storage().nbytes())

    handles = [b.register_forward_pre_hook(lambda m, a, i=i: note_input(i, a)) for i, b in enumerate(blocks)]
    with SavedTensorRecorder(model, exclude=(x, y)) as rec, FlopCounterMode(display=False) as flops:
        model(x, y)
    for h in handles:
        h.remove()
    stored = [0] * len(blocks)
    for t in rec.saved:
        if t.layer is not None:
            stored[t.layer] += t.nbytes
    counts = flops.get_flop_counts()
    cost = tuple(int(sum(counts.get(f"TinyGPT.h.{i}", {}).values())) for i in range(len(blocks)))
    mt = MemTracker()
    mt.track_external(model, getattr(trainer.optimizer, "inner", trainer.optimizer))
    with mt:
        trainer.step(1)
    root = mt.memory_tracking[model].snapshots
    other = _total(root[_ModState.PRE_FW][-1]) - _states(root[_ModState.PRE_FW][-1])

    def peak(module, state=_ModState.PEAK_BW) -> int:
        return _total(mt.memory_tracking[module].snapshots[state][-1]) - other

    head = max(peak(model, _ModState.POST_FW), peak(model.ln_f), peak(model.lm_head))
    return LayerTrace(tuple(stored), tuple(inputs[i] for i in range(len(blocks))),
                      tuple(peak(b) for b in blocks), head, cost)


def _total(snap: dict) -> int:
    return int(next(iter(snap.values()))["Total"])


def _states(snap: dict) -> int:
    row = next(iter(snap.values()))
    return int(sum(v for k, v in row.items() if getattr(k, "value", k) in ("Parameter", "Optstate")))


def _segments(plan: RecomputePlan) -> list[tuple[int, int, bool]]:
    """(start, stop, checkpointed) for every block: stored blocks are segments of one."""
    out, starts = [], dict(plan.segments)
    i = 0
    while i < plan.n_layer:
        stop = starts.get(i)
        out.append((i, stop, True) if stop else (i, i + 1, False))
        i = stop or i + 1
    return out


def predict_peak(trace: LayerTrace, plan: RecomputePlan) -> int:
    """Peak step bytes under ``plan``, from the trace (see the module docstring)."""
    if plan.selective or plan.n_layer != trace.n_layer:
        raise LabkitError(f"plan must be a block plan for n_layer={trace.n_layer} (got {plan.name})")
    kept, none_prefix, peak = 0, 0, 0
    for start, stop, ckpt in _segments(plan):
        shift = kept - none_prefix
        peak = max(peak, max(trace.bw_peaks[start:stop]) + shift)
        kept += trace.inputs[start] if ckpt else trace.stored[start]
        none_prefix += sum(trace.stored[start:stop])
    return max(peak, trace.head_peak + kept - none_prefix)


def recompute_cost(trace: LayerTrace, plan: RecomputePlan) -> int:
    """FLOPs the plan repeats: one forward of every checkpointed block."""
    return sum(trace.cost[i] for i in plan.checkpointed)


def _front(trace: LayerTrace, budget: float) -> list[tuple[int, int, int, tuple]]:
    """Dynamic programme over blocks: Pareto states (kept bytes, cost, peak, segments) after the last block.

    A state after block i is dominated by one that keeps no more bytes, costs no more and
    peaked no higher: every later check depends on the prefix only through the kept bytes.
    """
    n, prefix = trace.n_layer, [0]
    for s in trace.stored:
        prefix.append(prefix[-1] + s)
    fronts: list[list[tuple[int, int, int, tuple]]] = [[] for _ in range(n + 1)]
    fronts[0] = [(0, 0, 0, ())]
    for i in range(n):
        for kept, cost, peak, segs in fronts[i]:
            shift = kept - prefix[i]
            moves = [(i + 1, trace.stored[i], 0, trace.bw_peaks[i] + shift, None)]
            for stop in range(i + 1, n + 1):
                moves.append((stop, trace.inputs[i], sum(trace.cost[i:stop]), max(trace.bw_peaks[i:stop]) + shift,
                              (i, stop)))
            for stop, add, extra, at, seg in moves:
                new_peak = max(peak, at)
                if new_peak <= budget:
                    fronts[stop].append((kept + add, cost + extra, new_peak, segs + ((seg,) if seg else ())))
        for j in range(i + 1, n + 1):
            fronts[j] = _pareto(fronts[j])
    return [(k, c, max(p, trace.head_peak + k - prefix[n]), s) for k, c, p, s in fronts[n]
            if trace.head_peak + k - prefix[n] <= budget]


def _pareto(states: list[tuple[int, int, int, tuple]]) -> list[tuple[int, int, int, tuple]]:
    keep: list[tuple[int, int, int, tuple]] = []
    for s in sorted(states, key=lambda s: (s[0], s[1], s[2], len(s[3]))):
        if not any(k[0] <= s[0] and k[1] <= s[1] and k[2] <= s[2] for k in keep):
            keep.append(s)
    return keep


def min_feasible_budget(trace: LayerTrace) -> int:
    """The least peak any block plan reaches: no budget below it can be met."""
    return min(p for _, _, p, _ in _front(trace, math.inf))


def optimal_plan(trace: LayerTrace, budget: int) -> PlanChoice:
    """The plan with least recompute whose predicted peak fits ``budget`` bytes (ties: lower peak)."""
    require_positive("budget", budget)
    states = _front(trace, budget)
    if not states:
        raise LabkitError(f"budget of {budget:,} bytes is infeasible: the smallest feasible budget is "
                          f"{min_feasible_budget(trace):,} bytes")
    _, cost, peak, segs = min(states, key=lambda s: (s[1], s[2]))
    plan = RecomputePlan("optimal", trace.n_layer, segs)
    return PlanChoice(plan, peak, cost, True)


def uniform_plans(n_layer: int) -> list[RecomputePlan]:
    """none, every-k for k = 2..n-1, sqrt-all and full."""
    ks = range(2, n_layer)
    return [uniform_plan("none", n_layer), *(uniform_plan("every-k", n_layer, k) for k in ks),
            uniform_plan("sqrt-all", n_layer), uniform_plan("full", n_layer)]


def plan_table(trace: LayerTrace, budget: int) -> list[PlanChoice]:
    """The uniform plans and the optimal one for ``budget``: predicted peak, recompute, fits."""
    rows = [PlanChoice(p, predict_peak(trace, p), recompute_cost(trace, p), predict_peak(trace, p) <= budget)
            for p in uniform_plans(trace.n_layer)]
    return rows + [optimal_plan(trace, budget)]


def check_peak(train: TrainConfig, trace: LayerTrace, plan: RecomputePlan) -> Record:
    """Apply ``plan`` with ``recompute.apply_recompute`` to a fresh model and measure its real peak."""
    trainer = Trainer(train)
    apply_recompute(trainer.model, plan)
    trainer.step()  # the optimizer states exist before the measured step
    return Record(plan.name, peak_step_bytes(trainer), predict_peak(trace, plan), "bytes",
                  "predict_peak: the block trace shifted by each segment (Chen et al. 2016)")



def plan_text(choices: list[PlanChoice], budget: int) -> str:
    """:func:`plan_table` as text: plan, segments, predicted peak, recompute FLOPs, fits."""
    return text_table(
        [f"plan (budget {budget:,} B)", "checkpointed segments", "predicted peak B", "recompute FLOPs", "fits"],
        [[c.plan.name, " ".join(f"{a}-{b - 1}" for a, b in c.plan.segments) or "-", f"{c.predicted_peak:,}",
          f"{c.recompute_flops:,}", "yes" if c.fits else "no"] for c in choices])
