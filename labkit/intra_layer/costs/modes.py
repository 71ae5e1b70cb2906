"""Which tensor-parallel mode wins on a link: every mode's bytes held and seconds of collectives, ranked."""

from __future__ import annotations

import math
from dataclasses import dataclass

from labkit.errors import LabkitError, require_positive
from labkit.hardware import Link
from labkit.intra_layer.costs.grid import check
from labkit.intra_layer.costs.ops import cost, mlp
from labkit.predict import collectives as coll


def comm_seconds(mode: str, world_size: int, batch: int, hidden: int, ffn: int, link: Link, e: int = 2,
                 depth: int = 1, phase: str = "both", form: str = coll.DEFAULT_FORM) -> float:
    """Seconds one rank spends in the MLP block's collectives (forward, backward or both) over ``link``."""
    return cost(mode, world_size, "mlp", batch, hidden, ffn, depth, e).seconds(link, phase, form)


@dataclass(frozen=True)
class ModeChoice:
    """One way to spread the MLP block over the ranks, with its cost, or why it cannot run."""

    label: str
    mode: str
    depth: int
    q: int
    held_bytes: int = 0  # weights + biases + activations kept for backward
    wire_bytes: float = 0.0
    messages: int = 0
    seconds: float = math.inf
    time_rank: int | None = None
    memory_rank: int | None = None
    error: str = ""


def rank_modes(world_size: int, link: Link, batch: int, hidden: int, ffn: int, e: int = 2) -> list[ModeChoice]:
    """Every mode (2.5d at each depth 1 < d < P that fits) on ``world_size`` ranks, fastest first; those that cannot
    run last, with the reason.

    ``time_rank`` orders by :func:`comm_seconds`, ``memory_rank`` by bytes held per rank (1 is best).
    """
    require_positive("world_size", world_size)
    depths = [d for d in range(2, world_size) if world_size % d == 0]  # depth P, q = 1, is data parallelism
    options = [("1d", 1), ("2d", 1), *[("2.5d", d) for d in depths], ("3d", 1)]
    rows, bad = [], []
    for mode, d in options:
        try:
            g = check(mode, world_size, batch, hidden, ffn, d)
        except LabkitError as err:
            if mode != "2.5d":  # a 2.5d depth that does not fit is just not an option
                bad.append(ModeChoice(mode, mode, d, 0, error=str(err)))
            continue
        c = mlp(g, batch, hidden, ffn, e)
        rows.append(ModeChoice(g.label, mode, d, g.q, c.weight_bytes + c.bias_bytes + c.activation_bytes,
                               float(c.wire_bytes()), c.messages(), c.seconds(link)))
    by_memory = sorted(rows, key=lambda r: (r.held_bytes, r.seconds))
    ranked = []
    for t, r in enumerate(sorted(rows, key=lambda r: (r.seconds, r.held_bytes)), start=1):
        ranked.append(ModeChoice(**{**r.__dict__, "time_rank": t, "memory_rank": by_memory.index(r) + 1}))
    return ranked + bad
