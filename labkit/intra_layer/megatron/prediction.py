"""Megatron's and Korthikanti's formulas (collectives, parameter and activation bytes) beside a run."""

from __future__ import annotations

from dataclasses import dataclass

from labkit.intra_layer.megatron.model import check, model_config
from labkit.intra_layer.megatron.worker import RankResult
from labkit.measure.record import Record
from labkit.predict.estimate import activation_bytes_per_layer
from labkit.shapes import ModelShape


@dataclass(frozen=True)
class Collective:
    """Collectives of one kind at one place of a step: ``calls`` of them, ``elements`` in all."""

    part: str  # "layers" (the papers' count), "saved shards", "outside layers", "optimizer step"
    where: str
    kind: str
    calls: int
    elements: int


def collectives(tp: int, sp: bool = False, model: dict | None = None, batch_size: int = 2) -> list[Collective]:
    """Every collective of a training step, itemised: the papers' per-layer ones and what torch adds.

    Without SP each layer all-reduces b*s*h after its two row-parallel linears (g) and before its two
    column-parallel ones in backward (f) (Shoeybi et al. 2019). With SP each all-reduce is an all-gather
    and a reduce-scatter of the same size, plus a re-gather of each saved shard (Korthikanti et al.
    2022); the LayerNorm gradients are left Partial and all-reduced when the optimizer reads them.
    """
    cfg = model_config(model)
    check(tp, cfg, sp, batch_size)
    n, bs, h = 2 * cfg.n_layer, batch_size * cfg.seq_len, cfg.d_model
    bsh, c = bs * h, Collective
    if not sp:
        rows = [c("layers", "g: output of each row-parallel linear (forward)", "all_reduce", n, n * bsh),
                c("layers", "f: input gradient of each column-parallel linear (backward)", "all_reduce", n, n * bsh),
                c("outside layers", "wte: vocab-parallel embedding output (forward)", "all_reduce", 1, bsh),
                c("outside layers", "lm_head: input gradient (backward)", "all_reduce", 1, bsh)]
    else:
        norms = 4 * cfg.n_layer + 2  # weight and bias of ln_1, ln_2 per layer, and of ln_f
        rows = [c("layers", "input of each column-parallel linear (forward)", "all_gather", n, n * bsh),
                c("layers", "output of each row-parallel linear (forward)", "reduce_scatter", n, n * bsh),
                c("layers", "input gradient of each column-parallel linear (backward)", "reduce_scatter", n, n * bsh),
                c("layers", "output gradient of each row-parallel linear (backward)", "all_gather", n, n * bsh),
                c("saved shards", "input of each column-parallel linear, again (backward)", "all_gather", n, n * bsh),
                c("outside layers", "wte: output (forward)", "reduce_scatter", 1, bsh),
                c("outside layers", "wte: output gradient (backward)", "all_gather", 1, bsh),
                c("outside layers", "wpe: output gradient, Shard(0) to Replicate (backward)", "all_gather", 1,
                  cfg.seq_len * h),
                c("outside layers", "lm_head: input (forward), its saved shard (backward)", "all_gather", 2, 2 * bsh),
                c("outside layers", "lm_head: input gradient (backward)", "reduce_scatter", 1, bsh),
                c("optimizer step", "LayerNorm weight and bias gradients (Partial)", "all_reduce", norms, norms * h)]
    return rows + [c("outside layers", "loss_parallel: row max, sum of exp, target logit", "all_reduce", 3, 3 * bs)]


def comm_table(rows: list[Collective], parts: tuple[str, ...]) -> dict[str, dict[str, int]]:
    """Calls and elements by kind, summed over the rows of ``parts``."""
    out: dict[str, dict[str, int]] = {}
    for r in rows:
        if r.part in parts:
            row = out.setdefault(r.kind, {"calls": 0, "elements": 0})
            row["calls"] += r.calls
            row["elements"] += r.elements
    return dict(sorted(out.items()))


STEP_PARTS = ("layers", "saved shards", "outside layers")  # what one forward+backward issues


def param_bytes(tp: int, model: dict | None = None) -> int:
    """fp32 bytes per rank: split matrices and column-parallel biases /t; LayerNorms, row-parallel biases
    and ``wpe`` replicated; the tied ``wte``/``lm_head`` split by vocabulary (Shoeybi et al. 2019)."""
    cfg = model_config(model)
    h, f, t = cfg.d_model, cfg.ffn_size, tp
    layer = 4 * h + (3 * h * h + 3 * h) // t + h * h // t + h + (f * h + f) // t + f * h // t + h
    return 4 * (cfg.n_layer * layer + cfg.vocab_size * h // t + cfg.seq_len * h + 2 * h)


def activation_bytes(tp: int, sp: bool = False, model: dict | None = None, batch_size: int = 2) -> dict[str, float]:
    """Per layer per rank: Korthikanti et al.'s formula (fp32, 1-byte masks) and the exact count.

    The exact count adds what the formula leaves out: each LayerNorm keeps a mean and a 1/std per
    token, 2 * 4 bytes * b*s (on s/t tokens under SP).
    """
    cfg = model_config(model)
    check(tp, cfg, sp, batch_size)
    shape = ModelShape.from_config(cfg)
    formula = activation_bytes_per_layer(shape, cfg.seq_len, batch_size, 4, 1, tp, sp, "none", cfg.attention)
    return {"formula": formula, "exact": formula + 2 * 2 * 4 * batch_size * cfg.seq_len // (tp if sp else 1)}


SOURCE = "torch's DTensor split of the tiny GPT; paper: Shoeybi et al. 2019, Korthikanti et al. 2022"


def compare(results: list[RankResult]) -> list[Record]:
    """Parameter bytes, activation bytes per layer and collectives per kind, every rank, beside the model
    (``paper``: the papers' figure, None where they have none)."""
    rows = []
    for r in results:
        pred, act = collectives(r.tp, r.sp, r.model, r.batch_size), activation_bytes(r.tp, r.sp, r.model, r.batch_size)
        items = [("parameter bytes", r.param_bytes, param_bytes(r.tp, r.model), None, "bytes")]
        items += [(f"activation bytes, layer {i}", held, act["exact"], act["formula"], "bytes")
                  for i, held in enumerate(r.activation_bytes)]
        paper, got = comm_table(pred, ("layers",)), lambda comm, kind, field: comm.get(kind, {}).get(field, 0)
        items += [(f"{kind} {field}", got(r.comm, kind, field), want[field], got(paper, kind, field), field)
                  for kind, want in comm_table(pred, STEP_PARTS).items() for field in ("calls", "elements")]
        items += [(f"optimizer step {kind} elements", got(r.comm_step, kind, "elements"), want["elements"], None,
                   "elements") for kind, want in comm_table(pred, ("optimizer step",)).items()]
        where = (("tp", r.tp), ("sp", r.sp), ("rank", r.rank))
        rows += [Record(name, measured, predicted, unit, SOURCE, paper, where=where)
                 for name, measured, predicted, paper, unit in items]
    return rows
