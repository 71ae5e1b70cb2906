"""A run's bytes and collectives beside ``costs``'s prediction, and its error against one process."""

from __future__ import annotations

from labkit.intra_layer import costs
from labkit.intra_layer.multidim.runs import assemble, reference
from labkit.measure.record import Record


def predicted(run: dict) -> costs.Cost:
    """What ``costs`` says this run holds and moves (fp32: 4 bytes an element)."""
    return costs.cost(run["mode"], run["world_size"], run["block"], run["batch"], run["hidden"], run["ffn"],
                      run["depth"], e=4)


SOURCE = "labkit.intra_layer.costs (Optimus, Tesseract, Bian et al. 2021 as the module docstring cites)"


def compare(ranks: list[dict]) -> list[Record]:
    """Bytes held and, per phase and collective kind, calls and bytes: every rank, measured beside predicted."""
    rows = []
    for r in ranks:
        c = predicted(r)
        label = costs.grid(r["mode"], r["world_size"], r["depth"]).label
        where = (("layout", label), ("block", r["block"]), ("rank", r["rank"]))
        for cat in ("weight_bytes", "bias_bytes", "activation_bytes"):
            rows.append(Record(cat, r[cat], getattr(c, cat), "bytes", SOURCE, where=where))
        for phase in ("forward", "backward"):
            got = costs.comm_table(costs.Collective(*x) for x in r[phase])
            want = c.table(phase)
            for kind in sorted({*got, *want}):
                for what in ("calls", "bytes"):
                    rows.append(Record(f"{phase} {kind} {what}", got.get(kind, {}).get(what, 0),
                                       want.get(kind, {}).get(what, 0), what, SOURCE, where=where))
    return rows


def max_error(ranks: list[dict]) -> dict[str, float]:
    """Largest absolute difference from :func:`reference`, per tensor."""
    r0 = ranks[0]
    ref = reference(r0["block"], r0["batch"], r0["hidden"], r0["ffn"], r0["seed"])
    return {k: float((v - ref[k]).abs().max()) for k, v in assemble(ranks).items()}
