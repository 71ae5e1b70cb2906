"""The grid of ranks for each mode, and which block of X and W each rank holds."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

import torch.distributed as dist

from labkit.intra_layer import costs


def _cut(n: int, parts: int, index: int) -> tuple[int, int]:
    return (n // parts * index, n // parts * (index + 1))


@dataclass
class Mesh:
    """This rank's place on the grid of ``mode``, and the process groups it belongs to (None: one rank)."""

    grid: costs.Grid
    coords: dict[str, int]
    groups: dict[str, Any] = field(default_factory=dict)

    def block(self, role: str, shape: tuple[int, ...], layer: int = 0) -> tuple[tuple[int, int], ...]:
        """(start, stop) per dim of this rank's block of ``role`` (x, w, b, y) in the full tensor."""
        q, c, mode = self.grid.q, self.coords, self.grid.mode
        full = tuple((0, n) for n in shape)
        if mode == "1d":
            split = {("x", 1): 1, ("w", 0): 1, ("w", 1): 0, ("b", 0): 0, ("y", 0): 1}.get((role, layer))
            if split is None:
                return full
            return tuple(_cut(n, q, c["r"]) if k == split else (0, n) for k, n in enumerate(shape))
        if mode in ("2d", "2.5d"):
            if role == "b":  # the output columns' block j, the same on every grid row and layer
                return (_cut(shape[0], q, c["j"]),)
            if role == "w":
                return (_cut(shape[0], q, c["i"]), _cut(shape[1], q, c["j"]))
            return (_cut(shape[0], self.grid.depth * q, c["l"] * q + c["i"]), _cut(shape[1], q, c["j"]))
        a, o = (c["j"], c["l"]) if layer == 0 else (c["l"], c["j"])  # 3d: the second layer swaps j and l
        if role == "b":  # the output columns' block, the same for every i and the reduce axis
            return (_cut(shape[0], q, a),)
        i = c["i"]
        rows, cols = {"x": (i * q + a, o), "w": (o * q + i, a), "y": (i * q + o, a)}[role]
        return (_cut(shape[0], q * q, rows), _cut(shape[1], q, cols))


def _coords(g: costs.Grid, rank: int) -> tuple[tuple[str, ...], tuple[int, ...]]:
    if g.mode == "1d":
        return ("r",), (g.q,)
    if g.mode == "3d":
        return ("i", "j", "l"), (g.q,) * 3
    return ("l", "i", "j"), (g.depth, g.q, g.q)


_AXES = {"1d": {"world": ("r",)}, "3d": {"gi": ("i",), "gj": ("j",), "gl": ("l",)},
         "2d": {"row": ("j",), "col": ("i",), "depth": ("l",), "coldepth": ("l", "i")}}


_AXES["2.5d"] = _AXES["2d"]


def build_mesh(g: costs.Grid, rank: int) -> Mesh:
    """(Runs in a rank; every rank must call it in the same order.) One group per set of ranks that differ
    only along some axes: a grid row varies j, a column i, the depth group l, and so on."""
    names, shape = _coords(g, rank)
    points = list(itertools.product(*(range(n) for n in shape)))  # row-major: point index == rank
    mine = dict(zip(names, points[rank], strict=True))
    mesh = Mesh(g, mine)
    for gname, axes in _AXES[g.mode].items():
        fixed = [k for k, n in enumerate(names) if n not in axes]
        members: dict[tuple[int, ...], list[int]] = {}
        for r, p in enumerate(points):
            members.setdefault(tuple(p[k] for k in fixed), []).append(r)
        for ranks in members.values():
            group = dist.new_group(ranks) if len(ranks) > 1 else None
            if rank in ranks:
                mesh.groups[gname] = group
    return mesh
