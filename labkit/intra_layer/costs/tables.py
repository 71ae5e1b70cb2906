"""Colossal-AI's published efficiency tables for 1D, 2D, 2.5D and 3D tensor parallelism, and this model's terms of
the same kind, so that notebook 03 sets them side by side."""

from __future__ import annotations

from fractions import Fraction

from labkit.intra_layer.costs.grid import grid
from labkit.intra_layer.costs.ops import cost

SOURCE = ("Colossal-AI documentation, features/1D_tensor_parallel, 2D_tensor_parallel, 2p5D_tensor_parallel, "
          "3D_tensor_parallel: the Efficiency tables")

PUBLISHED_LEFT_OUT = ("db", "dW over depth", "X again", "W again")


def published(mode: str, world_size: int, depth: int = 1) -> dict[str, Fraction]:
    """Colossal-AI's Efficiency tables (``SOURCE``): per device, forward + backward, ring algorithm.

    Memory relative to one device: parameters 1/P, 1/q^2, 1/q^2, 1/q^3; activations 1, 1/q^2, 1/(d q^2),
    1/q^3 (the 1d "1" is the layer's replicated input, and the row-parallel layer's replicated output).
    Communication "bandwidth" 2(P-1)/P, 6(q-1)/q, 3(q-1)(d+1)/(dq), 6(q-1)/q^3 and "latency" 2(P-1),
    6(q-1), 6(q-1), 6(q-1): O() terms. 1d and 3d are per rank in units of one activation S = b h (as
    :func:`table_comm` reproduces them); the 2d and 2.5d ones are in another unit (see there).
    """
    g = grid(mode, world_size, depth)
    q, d = g.q, g.depth
    return {
        "parameters": {"1d": Fraction(1, q), "2d": Fraction(1, q * q), "2.5d": Fraction(1, q * q),
                       "3d": Fraction(1, q**3)}[mode],
        "activations": {"1d": Fraction(1), "2d": Fraction(1, q * q), "2.5d": Fraction(1, d * q * q),
                        "3d": Fraction(1, q**3)}[mode],
        "bandwidth": {"1d": Fraction(2 * (q - 1), q), "2d": Fraction(6 * (q - 1), q),
                      "2.5d": Fraction(3 * (q - 1) * (d + 1), d * q), "3d": Fraction(6 * (q - 1), q**3)}[mode],
        "latency": Fraction(2 * (q - 1) if mode == "1d" else 6 * (q - 1)),
    }


def table_comm(mode: str, world_size: int, depth: int = 1) -> dict[str, Fraction]:
    """This implementation's terms of :func:`published`'s kind: one square linear layer (b = h = out = n),
    forward + backward, ring bytes per rank over S = n^2 ("bandwidth") and sequential messages ("latency").

    Left out, as the tables leave them out: the bias all-reduce, 2.5d's all-reduce of dW over the layers
    (in ``extra_*``) and 3d's two gathers again in backward (in ``extra_*``; Colossal-AI keeps the gathered
    blocks instead). Then 1d and 3d equal the tables exactly. 2d and 2.5d give 12(q-1)/q^2 and
    6(q-1)(d+1)/(d q^2) S, equal to the tables at q = 2 only: the tables' unit there is not S per rank.
    Their ratio, (d+1)/(2d), and their equal latency, agree for every q and d. Our 2d latency counts
    every message: 3 SUMMAs of 2q broadcasts or reduces, 2(q-1) messages each, 12q(q-1) in all.
    """
    g = grid(mode, world_size, depth)
    n = world_size * g.q  # divisible by every split of every mode
    calls = cost(mode, world_size, "linear", n, n, n, depth, e=1).calls()
    counted = [c for c in calls if c.what not in PUBLISHED_LEFT_OUT]
    extra = [c for c in calls if c.what in PUBLISHED_LEFT_OUT and c.what != "db"]
    return {"bandwidth": sum((c.wire_bytes for c in counted), Fraction(0)) / n**2,
            "latency": Fraction(sum(c.messages for c in counted)),
            "extra_bandwidth": sum((c.wire_bytes for c in extra), Fraction(0)) / n**2,
            "extra_latency": Fraction(sum(c.messages for c in extra))}
