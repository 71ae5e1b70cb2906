"""Per-device memory and collectives of 1D, 2D, 2.5D and 3D tensor parallelism, exactly as ``multidim`` runs them.

Pure functions, no torch: what one rank holds and moves for ``Y = X W + b`` (``X`` of ``batch`` rows,
``batch`` = micro-batch x sequence) and for the MLP block ``Linear(h, f) -> GeLU -> Linear(f, h)``, for

* ``1d``: Megatron (Shoeybi et al., 2019): column-parallel then row-parallel, P ranks, X replicated;
* ``2d``: SUMMA (van de Geijn & Watts, 1997) as Optimus uses it (Xu et al., 2021), P = q^2;
* ``2.5d``: Tesseract (Wang et al., 2022): d layers of q x q grids, P = d q^2, X split over the layers too;
* ``3d``: Bian et al., 2021 (Colossal-AI's 3D), P = q^3.

Each collective is counted as one rank sees it (:class:`Collective`): its kind, the ranks in its group and
the bytes of the whole tensor it covers there (the all-reduced or broadcast or reduced tensor, an
all-gather's output, a reduce-scatter's input), the convention of ``labkit.inter_layer.zero``. A group of
one rank moves nothing and is not called. Every rank of a mode sees the same list.

Time model: one rank's collectives run one after another, none overlapping compute or each other,
each priced by ``labkit.predict.collectives`` (the ring algorithm of Chan et al., 2007, with its
latency terms, at NCCL's bus bandwidth by default or the link's nominal one with
``form="textbook"``): the same price the advisor and notebook 02 give the same collective.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction

from labkit.errors import require_choice, require_positive
from labkit.hardware import Link
from labkit.intra_layer.costs.grid import Grid, check
from labkit.predict import collectives as coll

PHASES = ("forward", "backward", "both")


@dataclass(frozen=True, order=True)
class Collective:
    """One collective as one rank sees it: kind, ranks in the group, bytes of the tensor it covers.

    ``what`` names the tensor (X, W, Y, dY, dX, dW, db); a measurement cannot see it, so it is left out
    of comparisons.
    """

    kind: str
    group: int
    nbytes: int
    what: str = field(default="", compare=False)

    @property
    def messages(self) -> int:
        """Sequential messages of the ring algorithm (``labkit.predict.collectives``)."""
        return coll.messages(self.kind, self.group)

    @property
    def message_bytes(self) -> Fraction:
        return Fraction(self.nbytes, self.group)

    @property
    def wire_bytes(self) -> Fraction:
        """Bytes this rank sends (and as many it receives): messages x n/g."""
        return self.messages * self.message_bytes

    def seconds(self, link: Link, form: str = coll.DEFAULT_FORM) -> float:
        return coll.seconds(self.kind, self.nbytes, self.group, link, form)


@dataclass(frozen=True)
class Cost:
    """One rank's bytes held (weights, biases, activations kept for backward) and collectives per phase."""

    weight_bytes: int
    bias_bytes: int
    activation_bytes: int
    forward: tuple[Collective, ...] = ()
    backward: tuple[Collective, ...] = ()

    def __add__(self, other: Cost) -> Cost:
        return Cost(self.weight_bytes + other.weight_bytes, self.bias_bytes + other.bias_bytes,
                    self.activation_bytes + other.activation_bytes, self.forward + other.forward,
                    self.backward + other.backward)

    def calls(self, phase: str = "both") -> tuple[Collective, ...]:
        require_choice("phase", phase, PHASES)
        return {"forward": self.forward, "backward": self.backward, "both": self.forward + self.backward}[phase]

    def table(self, phase: str = "both") -> dict[str, dict[str, int]]:
        """Calls and bytes by collective kind, the form ``multidim`` measures."""
        return comm_table(self.calls(phase))

    def wire_bytes(self, phase: str = "both") -> Fraction:
        return sum((c.wire_bytes for c in self.calls(phase)), Fraction(0))

    def messages(self, phase: str = "both") -> int:
        return sum(c.messages for c in self.calls(phase))

    def seconds(self, link: Link, phase: str = "both", form: str = coll.DEFAULT_FORM) -> float:
        return sum(c.seconds(link, form) for c in self.calls(phase))


def comm_table(calls) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for c in calls:
        row = out.setdefault(c.kind, {"calls": 0, "bytes": 0})
        row["calls"] += 1
        row["bytes"] += c.nbytes
    return dict(sorted(out.items()))


def _calls(*items: tuple[str, int, int, str]) -> tuple[Collective, ...]:
    return tuple(Collective(*item) for item in items if item[1] > 1)


def linear(g: Grid, batch: int, n_in: int, n_out: int, e: int = 4, layer: int = 0) -> Cost:
    """``Y = X W + b`` with W of n_in x n_out; ``layer`` 0 or 1 is its place in the MLP (1d: column or row)."""
    q, d, b = g.q, g.depth, batch
    if g.mode == "1d" and layer == 0:  # column-parallel: X replicated, W and b split by columns
        bwd = _calls(("all_reduce", q, b * n_in * e, "dX"))
        return Cost(n_in * n_out // q * e, n_out // q * e, b * n_in * e, (), bwd)
    if g.mode == "1d":  # row-parallel: X split by columns, W by rows, b replicated
        fwd = _calls(("all_reduce", q, b * n_out * e, "Y"))
        return Cost(n_in // q * n_out * e, n_out * e, b * n_in // q * e, fwd)
    if g.mode in ("2d", "2.5d"):  # SUMMA inside each of the d layers; W replicated over the layers
        x, w = b // (d * q) * (n_in // q) * e, (n_in // q) * (n_out // q) * e
        fwd = _calls(*[("broadcast", q, x, "X"), ("broadcast", q, w, "W")] * q)
        bwd = _calls(*[("broadcast", q, w, "W"), ("reduce", q, x, "dX")] * q,
                     *[("broadcast", q, x, "X"), ("reduce", q, w, "dW")] * q,
                     ("all_reduce", d, w, "dW over depth"), ("all_reduce", d * q, n_out // q * e, "db"))
        return Cost(w, n_out // q * e, x, fwd, bwd)
    x, w, y = b // q * (n_in // q) * e, n_in // q * (n_out // q) * e, b // q * (n_out // q) * e  # gathered sizes
    fwd = _calls(("all_gather", q, x, "X"), ("all_gather", q, w, "W"), ("reduce_scatter", q, y, "Y"))
    bwd = _calls(("all_gather", q, y, "dY"), ("all_gather", q, x, "X again"), ("all_gather", q, w, "W again"),
                 ("reduce_scatter", q, x, "dX"), ("reduce_scatter", q, w, "dW"),
                 ("all_reduce", q, n_out // q * e, "db"))
    return Cost(w // q, n_out // q * e, x // q, fwd, bwd)


def mlp(g: Grid, batch: int, hidden: int, ffn: int, e: int = 4) -> Cost:
    """Linear(h, f), GeLU (keeps its input, the first layer's output block), Linear(f, h)."""
    gelu_input = batch // g.rows_split * (ffn // g.q) * e  # 1d: q = P, rows not split
    return linear(g, batch, hidden, ffn, e, 0) + Cost(0, 0, gelu_input) + linear(g, batch, ffn, hidden, e, 1)


BLOCKS = ("linear", "mlp")


def cost(mode: str, world_size: int, block: str, batch: int, hidden: int, ffn: int, depth: int = 1,
         e: int = 4) -> Cost:
    """What one rank holds and moves for ``block`` ("linear": h -> f, the MLP's first layer; "mlp")."""
    require_choice("block", block, BLOCKS)
    require_positive("e", e)
    g = check(mode, world_size, batch, hidden, ffn, depth)
    return linear(g, batch, hidden, ffn, e) if block == "linear" else mlp(g, batch, hidden, ffn, e)


def single_device(block: str, batch: int, hidden: int, ffn: int, e: int = 4) -> Cost:
    """The same block on one device: 1d with P = 1."""
    return cost("1d", 1, block, batch, hidden, ffn, 1, e)


def ratios(mode: str, world_size: int, batch: int, hidden: int, ffn: int, depth: int = 1) -> dict[str, Fraction]:
    """Per-device bytes over one device's, for the linear layer: weights, biases, the input it keeps."""
    mine, one = cost(mode, world_size, "linear", batch, hidden, ffn, depth), single_device("linear", batch, hidden, ffn)
    return {"parameters": Fraction(mine.weight_bytes, one.weight_bytes),
            "biases": Fraction(mine.bias_bytes, one.bias_bytes),
            "activations": Fraction(mine.activation_bytes, one.activation_bytes)}
