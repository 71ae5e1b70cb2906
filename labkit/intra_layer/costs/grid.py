"""The grids 1D, 2D, 2.5D and 3D tensor parallelism arrange their ranks on, and the sizes each grid needs.

1d is Megatron (Shoeybi et al., 2019), P ranks; 2d is SUMMA (van de Geijn & Watts, 1997) as Optimus
uses it (Xu et al., 2021), P = q^2; 2.5d is Tesseract (Wang et al., 2022), d layers of q x q grids,
P = d q^2; 3d is Bian et al., 2021 (Colossal-AI's 3D), P = q^3.
"""

from __future__ import annotations

from dataclasses import dataclass

from labkit.errors import LabkitError, require_choice, require_positive

MODES = ("1d", "2d", "2.5d", "3d")


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
