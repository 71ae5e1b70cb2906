"""Per-device memory and communication of 1D, 2D, 2.5D and 3D tensor parallelism, exactly as ``multidim`` runs them.

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

Time model (:func:`comm_seconds`): one rank's collectives run one after another, none overlapping
compute or each other. A collective over g ranks is the long-vector ring algorithm of Chan et al.,
"Collective communication: theory, practice, and experience", 2007: an all-gather or a reduce-scatter
of n bytes is g - 1 messages of n/g; an all-reduce (reduce-scatter then all-gather), a broadcast
(scatter then all-gather, van de Geijn's) and a reduce (reduce-scatter then gather) are 2(g - 1)
messages of n/g. Each message costs ``labkit.hardware.transfer_time``: latency + bytes / bandwidth
(the alpha-beta model).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction

from labkit.errors import LabkitError, require_choice, require_positive
from labkit.hardware import Link, transfer_time

MODES = ("1d", "2d", "2.5d", "3d")
PHASES = ("forward", "backward", "both")
SOURCE = ("Colossal-AI documentation, features/1D_tensor_parallel, 2D_tensor_parallel, 2p5D_tensor_parallel, "
          "3D_tensor_parallel: the Efficiency tables")


@dataclass(frozen=True)
class Grid:
    """How ``world_size`` ranks are arranged: ``q`` is the grid side (1d: P), ``depth`` the 2.5d layers."""

    mode: str
    world_size: int
    q: int
    depth: int = 1

    @property
    def rows_split(self) -> int:
        """Parts the batch rows are cut into (1d: none)."""
        return {"1d": 1, "2d": self.q, "2.5d": self.depth * self.q, "3d": self.q**2}[self.mode]

    @property
    def label(self) -> str:
        return {"1d": f"1d (P={self.q})", "2d": f"2d (q={self.q})", "3d": f"3d (q={self.q})",
                "2.5d": f"2.5d (d={self.depth}, q={self.q})"}[self.mode]


def _root(n: int, k: int) -> int | None:
    r = round(n ** (1 / k))
    return next((c for c in (r - 1, r, r + 1) if c > 0 and c**k == n), None)


def grid(mode: str, world_size: int, depth: int = 1) -> Grid:
    """The grid of ``mode`` on ``world_size`` ranks; a LabkitError names the field and the sizes allowed."""
    require_choice("mode", mode, MODES)
    require_positive("world_size", world_size)
    require_positive("depth", depth)
    if mode != "2.5d" and depth != 1:
        raise LabkitError(f"depth must be 1 for mode {mode}: only 2.5d has layers (got {depth})")
    if mode == "1d":
        return Grid(mode, world_size, world_size)
    power = 3 if mode == "3d" else 2
    side = _root(world_size // depth, power) if world_size % depth == 0 else None
    if side is None:
        what = {"2d": "a square number", "3d": "a cube number", "2.5d": f"depth * q**2 with depth={depth}"}[mode]
        shown = ", ".join(str(depth * k**power) for k in range(1, 5))
        raise LabkitError(f"world_size must be {what} for mode {mode}: {shown}, ... (got {world_size})")
    return Grid(mode, world_size, side, depth)


def divisors(g: Grid) -> dict[str, int]:
    """What ``batch``, ``hidden`` and ``ffn`` must be multiples of for this grid (the blocks must be equal)."""
    q = g.q
    return {"1d": {"batch": 1, "hidden": 1, "ffn": q}, "2d": {"batch": q, "hidden": q, "ffn": q},
            "2.5d": {"batch": g.depth * q, "hidden": q, "ffn": q},
            "3d": {"batch": q * q, "hidden": q * q, "ffn": q * q}}[g.mode]


def check(mode: str, world_size: int, batch: int, hidden: int, ffn: int, depth: int = 1) -> Grid:
    """The grid, after checking that every tensor splits into equal blocks on it."""
    g = grid(mode, world_size, depth)
    sizes = {"batch": batch, "hidden": hidden, "ffn": ffn}
    for name, value in sizes.items():
        require_positive(name, value)
    for name, k in divisors(g).items():
        if sizes[name] % k:
            raise LabkitError(f"{name} must be a multiple of {k} for mode {g.label}: {k}, {2 * k}, {3 * k}, ... "
                              f"(got {sizes[name]})")
    return g


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
        """Sequential messages of the ring algorithm (module docstring)."""
        return (self.group - 1) * (1 if self.kind in ("all_gather", "reduce_scatter") else 2)

    @property
    def message_bytes(self) -> Fraction:
        return Fraction(self.nbytes, self.group)

    @property
    def wire_bytes(self) -> Fraction:
        """Bytes this rank sends (and as many it receives): messages x n/g."""
        return self.messages * self.message_bytes

    def seconds(self, link: Link) -> float:
        return self.messages * transfer_time(float(self.message_bytes), link)


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

    def seconds(self, link: Link, phase: str = "both") -> float:
        return sum(c.seconds(link) for c in self.calls(phase))


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


def comm_seconds(mode: str, world_size: int, batch: int, hidden: int, ffn: int, link: Link, e: int = 2,
                 depth: int = 1, phase: str = "both") -> float:
    """Seconds one rank spends in the MLP block's collectives (forward, backward or both) over ``link``."""
    return cost(mode, world_size, "mlp", batch, hidden, ffn, depth, e).seconds(link, phase)


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
