"""1D, 2D, 2.5D and 3D tensor parallelism of a linear layer and an MLP block, by hand, on torch.distributed groups.

Written here because no library ships them: torch's DTensor plans cover 1D (column and row) only, and
Colossal-AI's 2D/2.5D/3D layers live in its legacy package, not a dependency of this lab. Each mode is
an ``autograd.Function`` with its forward and backward written out, so the collectives it runs and the
tensors it keeps are exactly those ``costs`` counts:

* ``1d``: Megatron's column-parallel then row-parallel layers (Shoeybi et al., 2019), the baseline;
* ``2d``: SUMMA (van de Geijn & Watts, "SUMMA: Scalable Universal Matrix Multiplication Algorithm",
  1997) as Optimus uses it (Xu et al., "An Efficient 2D Method for Training Super-Large Deep Learning
  Models", 2021): X and W cut into q x q blocks; step k broadcasts X_ik along grid row i and W_kj
  down grid column j. Backward broadcasts W (then X) again and reduces the partial products to the
  block's owner, as Colossal-AI's Matmul_ABT/ATB do;
* ``2.5d``: Tesseract (Wang et al., "Tesseract: Parallelize the Tensor Parallelism Efficiently", 2022):
  d layers of q x q grids; the rows of X are cut over the layers too, W is replicated over them, so
  backward also all-reduces dW over the d layers. With d = 1 it is 2d, call for call;
* ``3d``: Bian et al., "Maximizing Parallelism in Distributed Training for Huge Neural Networks", 2021,
  as the Colossal-AI documentation describes it: all-gather X and W, multiply, reduce-scatter Y. Each
  layer keeps only its own 1/q^3 of X and W and gathers them again in backward (two more all-gathers),
  so activations stay at the published 1/q^3. Colossal-AI's ``_Linear3D`` keeps the gathered blocks
  instead (1/q^2 of X), which is where its table's 6(q-1) collectives per layer come from.

Rank r sits at ``(l, i, j)`` with ``r = (l q + i) q + j`` in 2d/2.5d (l the layer, i the grid row, j the
column) and at ``(i, j, l)`` with ``r = (i q + j) q + l`` in 3d. Everything is fp32; the data are made
from one seed on every rank, each rank cuts out its blocks, and returns its output and gradient blocks
with their place in the full tensor, so the parent can put Y, dX, dW and db back together (:func:`assemble`)
and compare them with one process (:func:`reference`). Collectives are counted by a ``TorchDispatchMode``
that sees every ``c10d`` op, with its group's size; activations by saved-tensor hooks, one count per storage.
"""

from __future__ import annotations

import itertools
import os
import time
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from labkit import dist as ldist
from labkit.errors import require_choice
from labkit.intra_layer import costs

MODES, BLOCKS = costs.MODES, costs.BLOCKS
DEFAULTS = {"block": "mlp", "batch": 16, "hidden": 16, "ffn": 64, "depth": 1, "seed": 0}
_KINDS = {"allreduce_": "all_reduce", "broadcast_": "broadcast", "reduce_": "reduce",
          "_allgather_base_": "all_gather", "_reduce_scatter_base_": "reduce_scatter"}


class CollectiveLog(TorchDispatchMode):
    """Every c10d collective dispatched while active, as ``(kind, group size, bytes of its largest tensor)``."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, int, int]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        space, name = func._schema.name.split("::")
        if space == "c10d" and name not in ("barrier", "monitored_barrier_"):
            leaves = tree_leaves((args, kwargs or {}))
            groups = [a for a in leaves if isinstance(a, torch.ScriptObject)]  # the boxed ProcessGroup
            size = torch._C._distributed_c10d.ProcessGroup.unbox(groups[0]).size() if groups else 0
            nbytes = max((t.numel() * t.element_size() for t in leaves if isinstance(t, torch.Tensor)), default=0)
            self.calls.append((_KINDS.get(name, name), size, nbytes))
        return out


# ------------------------------------------------------------------ collectives (a group of one rank: none)


def _broadcast(t: torch.Tensor, src: int, group) -> torch.Tensor:
    if group is not None:
        dist.broadcast(t, group=group, group_src=src)
    return t


def _reduce(t: torch.Tensor, dst: int, group) -> torch.Tensor:
    if group is not None:
        dist.reduce(t, group=group, group_dst=dst)
    return t


def _all_reduce(t: torch.Tensor, group) -> torch.Tensor:
    if group is not None:
        dist.all_reduce(t, group=group)
    return t


def _all_gather(piece: torch.Tensor, group) -> torch.Tensor:
    """Pieces of all ranks of ``group``, stacked along dim 0 in group-rank order."""
    if group is None:
        return piece
    out = piece.new_empty((group.size() * piece.shape[0], *piece.shape[1:]))
    dist.all_gather_single(out, piece.contiguous(), group=group)
    return out


def _reduce_scatter(full: torch.Tensor, group) -> torch.Tensor:
    """Sum over ``group``, then this rank's 1/g of dim 0."""
    if group is None:
        return full
    out = full.new_empty((full.shape[0] // group.size(), *full.shape[1:]))
    dist.reduce_scatter_single(out, full.contiguous(), group=group)
    return out


# ------------------------------------------------------------------ the grid of ranks and where blocks live


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


# ------------------------------------------------------------------ the layers, forward and backward by hand


class _Column1D(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w, b, mesh):
        ctx.save_for_backward(x, w)
        ctx.mesh = mesh
        return torch.addmm(b, x, w)

    @staticmethod
    def backward(ctx, dy):
        x, w = ctx.saved_tensors
        dx = _all_reduce(dy @ w.T, ctx.mesh.groups["world"])  # Megatron's f: identity forward, all-reduce back
        return dx, x.T @ dy, dy.sum(0), None


class _Row1D(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w, b, mesh):
        ctx.save_for_backward(x, w)
        return _all_reduce(x @ w, mesh.groups["world"]).add_(b)  # Megatron's g: all-reduce forward

    @staticmethod
    def backward(ctx, dy):
        x, w = ctx.saved_tensors
        return dy @ w.T, x.T @ dy, dy.sum(0), None  # dy is the same on every rank: db needs no collective


class _Summa(torch.autograd.Function):
    """2d and 2.5d: SUMMA inside this rank's layer of the grid."""

    @staticmethod
    def forward(ctx, x, w, b, mesh):
        ctx.save_for_backward(x, w)
        ctx.mesh = mesh
        i, j, row, col = mesh.coords["i"], mesh.coords["j"], mesh.groups["row"], mesh.groups["col"]
        y = x.new_zeros((x.shape[0], w.shape[1]))
        for k in range(mesh.grid.q):
            xk = _broadcast(x if j == k else torch.empty_like(x), k, row)  # X_ik along grid row i
            wk = _broadcast(w if i == k else torch.empty_like(w), k, col)  # W_kj down grid column j
            y.addmm_(xk, wk)
        return y.add_(b)

    @staticmethod
    def backward(ctx, dy):
        x, w = ctx.saved_tensors
        mesh, dy = ctx.mesh, dy.contiguous()
        i, j, row, col = mesh.coords["i"], mesh.coords["j"], mesh.groups["row"], mesh.groups["col"]
        dx = dw = None
        for k in range(mesh.grid.q):  # dX_ik = sum_j dY_ij W_kj^T, summed onto rank (i, k)
            wk = _broadcast(w if i == k else torch.empty_like(w), k, col)
            part = _reduce(dy @ wk.T, k, row)
            dx = part if j == k else dx
        for k in range(mesh.grid.q):  # dW_kj = sum_i X_ik^T dY_ij, summed onto rank (k, j)
            xk = _broadcast(x if j == k else torch.empty_like(x), k, row)
            part = _reduce(xk.T @ dy, k, col)
            dw = part if i == k else dw
        dw = _all_reduce(dw, mesh.groups["depth"])  # 2.5d: W is replicated over the d layers
        return dx, dw, _all_reduce(dy.sum(0), mesh.groups["coldepth"]), None


class _Cube(torch.autograd.Function):
    """3d: all-gather X over the input axis and W over i, multiply, reduce-scatter Y over the output axis."""

    @staticmethod
    def forward(ctx, x, w, b, mesh, layer):
        ctx.save_for_backward(x, w)  # only this rank's pieces: 1/q^3 of each
        ctx.mesh, ctx.layer = mesh, layer
        gx, gw, gy = _cube_groups(mesh, layer)
        return _reduce_scatter(_all_gather(x, gx) @ _all_gather(w, gw), gy).add_(b)

    @staticmethod
    def backward(ctx, dy):
        x, w = ctx.saved_tensors
        gx, gw, gy = _cube_groups(ctx.mesh, ctx.layer)
        dy = _all_gather(dy, gy)
        xg, wg = _all_gather(x, gx), _all_gather(w, gw)  # gathered again, not kept from forward
        dx, dw = _reduce_scatter(dy @ wg.T, gx), _reduce_scatter(xg.T @ dy, gw)
        return dx, dw, _all_reduce(dy.sum(0), gw), None, None


def _cube_groups(mesh: Mesh, layer: int) -> tuple[Any, Any, Any]:
    g = mesh.groups
    return (g["gj"], g["gi"], g["gl"]) if layer == 0 else (g["gl"], g["gi"], g["gj"])


def linear(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, mesh: Mesh, layer: int = 0) -> torch.Tensor:
    """This rank's block of ``x @ W + b``; ``layer`` 0 or 1 is the place in the MLP (1d: column or row)."""
    mode = mesh.grid.mode
    if mode == "1d":
        return (_Column1D if layer == 0 else _Row1D).apply(x, w, b, mesh)
    if mode == "3d":
        return _Cube.apply(x, w, b, mesh, layer)
    return _Summa.apply(x, w, b, mesh)


def mlp(x: torch.Tensor, params: dict[str, torch.Tensor], mesh: Mesh) -> torch.Tensor:
    """Linear(h, f) -> GeLU -> Linear(f, h), each linear in the mesh's mode."""
    z = F.gelu(linear(x, params["w1"], params["b1"], mesh, 0))
    return linear(z, params["w2"], params["b2"], mesh, 1)


# ------------------------------------------------------------------ one run: data, measurement, blocks back


def problem(block: str = "mlp", batch: int = 16, hidden: int = 16, ffn: int = 64, seed: int = 0) -> dict:
    """The full tensors, the same on every rank and in the parent: x, w1, b1 (w2, b2) and g, the upstream dY."""
    require_choice("block", block, BLOCKS)
    gen = torch.Generator().manual_seed(seed)
    rand = lambda *shape, scale=1.0: torch.randn(*shape, generator=gen) * scale  # noqa: E731
    out = {"x": rand(batch, hidden), "w1": rand(hidden, ffn, scale=hidden**-0.5), "b1": rand(ffn, scale=0.1)}
    if block == "mlp":
        out |= {"w2": rand(ffn, hidden, scale=ffn**-0.5), "b2": rand(hidden, scale=0.1)}
    out["g"] = rand(batch, hidden if block == "mlp" else ffn)
    return out


def reference(block: str = "mlp", batch: int = 16, hidden: int = 16, ffn: int = 64, seed: int = 0,
              **_: Any) -> dict[str, torch.Tensor]:
    """The unsplit computation in this process: y and the gradients of x and of every parameter."""
    t = {k: v.clone().requires_grad_(k != "g") for k, v in problem(block, batch, hidden, ffn, seed).items()}
    y = t["x"] @ t["w1"] + t["b1"]
    if block == "mlp":
        y = F.gelu(y) @ t["w2"] + t["b2"]
    y.backward(t["g"])
    return {"y": y.detach(), **{f"d{k}": v.grad for k, v in t.items() if k != "g"}}


def _take(t: torch.Tensor, where: tuple[tuple[int, int], ...]) -> torch.Tensor:
    return t[tuple(slice(a, b) for a, b in where)].clone()  # contiguous, its own storage


def _device(rank: int) -> torch.device:
    """The CPU under gloo; this rank's GPU under NCCL (torchrun on a GPU node; not run on GPUs here)."""
    if dist.get_backend() != "nccl":
        return torch.device("cpu")
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank % torch.cuda.device_count())))
    return torch.device("cuda", torch.cuda.current_device())


def _storage_bytes(tensors) -> int:
    seen = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in tensors}
    return sum(seen.values())


def run_mode(rank: int, world_size: int, mode: str = "2d", block: str = "mlp", batch: int = 16, hidden: int = 16,
             ffn: int = 64, depth: int = 1, seed: int = 0, mesh: Mesh | None = None, pieces: bool = True) -> dict:
    """(Runs in a rank.) One forward and backward of ``block`` in ``mode``: bytes held, collectives, blocks.

    Returns weight and bias bytes held, activation bytes kept for backward (by storage; parameters left
    out), the collectives of forward and of backward as ``(kind, group size, bytes)``, wall-clock seconds
    (never asserted), and ``pieces`` (unless False): for y, dx, dw1, db1 (dw2, db2), this rank's block and
    its place in the full tensor.
    """
    g = costs.check(mode, world_size, batch, hidden, ffn, depth)
    mesh = mesh or build_mesh(g, rank)
    full = problem(block, batch, hidden, ffn, seed)
    layers = (0, 1) if block == "mlp" else (0,)
    where = {"x": mesh.block("x", full["x"].shape), "y": mesh.block("y", full["g"].shape, layers[-1])}
    for n in layers:
        for role in ("w", "b"):
            where[f"{role}{n + 1}"] = mesh.block(role, full[f"{role}{n + 1}"].shape, n)
    device = _device(rank)
    local = {k: _take(full[k if k != "y" else "g"], w).to(device).requires_grad_(k != "y") for k, w in where.items()}
    params = {k: v for k, v in local.items() if k[0] in "wb"}
    skip = {p.untyped_storage().data_ptr() for p in params.values()}
    saved: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        key = t.untyped_storage().data_ptr()
        if key not in skip:
            saved[key] = t.untyped_storage().nbytes()
        return t

    t0 = time.perf_counter()
    with CollectiveLog() as fwd, torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        y = mlp(local["x"], params, mesh) if block == "mlp" else linear(local["x"], params["w1"], params["b1"], mesh)
    t1 = time.perf_counter()
    with CollectiveLog() as bwd:
        y.backward(local["y"].detach())
    t2 = time.perf_counter()
    grads = {f"d{k}": (where[k], v.grad.cpu()) for k, v in local.items() if k != "y"}
    out = {"mode": mode, "block": block, "rank": rank, "world_size": world_size, "q": g.q, "depth": g.depth,
           "batch": batch, "hidden": hidden, "ffn": ffn, "seed": seed,
           "weight_bytes": _storage_bytes(v for k, v in params.items() if k[0] == "w"),
           "bias_bytes": _storage_bytes(v for k, v in params.items() if k[0] == "b"),
           "activation_bytes": sum(saved.values()), "forward": fwd.calls, "backward": bwd.calls,
           "seconds": {"forward": t1 - t0, "backward": t2 - t1}}
    return out | ({"pieces": {"y": (where["y"], y.detach().cpu()), **grads}} if pieces else {})


def run_configs(rank: int, world_size: int, configs: tuple[dict, ...], pieces: bool = True) -> list[dict]:
    """(Runs in a rank.) ``run_mode(**config)`` for each config in one process group; each grid's groups are
    built once (``seconds["groups"]`` says how long that took, 0 when reused)."""
    meshes: dict[tuple[str, int], Mesh] = {}
    out = []
    for cfg in configs:
        cfg = {**DEFAULTS, **cfg}
        g = costs.check(cfg["mode"], world_size, cfg["batch"], cfg["hidden"], cfg["ffn"], cfg["depth"])
        t0 = time.perf_counter()
        if (g.mode, g.depth) not in meshes:
            meshes[g.mode, g.depth] = build_mesh(g, rank)
        built = time.perf_counter() - t0
        run = run_mode(rank, world_size, mesh=meshes[g.mode, g.depth], pieces=pieces, **cfg)
        run["seconds"]["groups"] = built
        out.append(run)
    return out


def run_modes(world_size: int, configs: list[dict], timeout: float = 120.0) -> list[list[dict]]:
    """Run each config (keyword arguments of ``run_mode``: mode, block, batch, hidden, ffn, depth, seed) on
    ``world_size`` local ranks, all in one process group (one start-up); per config, per rank."""
    configs = [{**DEFAULTS, **c} for c in configs]
    for c in configs:  # bad input fails here, with a clear message, before any rank starts
        require_choice("block", c["block"], BLOCKS)
        costs.check(c["mode"], world_size, c["batch"], c["hidden"], c["ffn"], c["depth"])
    out = ldist.run(run_configs, world_size, timeout=timeout, threads=1, configs=tuple(configs))
    return [[ranks[n] for ranks in out] for n in range(len(configs))]


def assemble(ranks: list[dict]) -> dict[str, torch.Tensor]:
    """Full y and gradients from every rank's blocks; raises if a part is missing or two copies differ."""
    out = {}
    for name in ranks[0]["pieces"]:
        where0 = ranks[0]["pieces"][name][0]
        shape = tuple(max(r["pieces"][name][0][k][1] for r in ranks) for k in range(len(where0)))
        full, seen = torch.zeros(shape), torch.zeros(shape, dtype=torch.bool)
        for r in ranks:
            where, block = r["pieces"][name]
            index = tuple(slice(a, b) for a, b in where)
            if seen[index].any() and not torch.equal(full[index], block):
                raise RuntimeError(f"{name}: rank {r['rank']}'s copy differs from another rank's")
            full[index], seen[index] = block, True
        if not seen.all():
            raise RuntimeError(f"{name}: the ranks' blocks do not cover the full tensor")
        out[name] = full
    return out


def predicted(run: dict) -> costs.Cost:
    """What ``costs`` says this run holds and moves (fp32: 4 bytes an element)."""
    return costs.cost(run["mode"], run["world_size"], run["block"], run["batch"], run["hidden"], run["ffn"],
                      run["depth"], e=4)


@dataclass(frozen=True)
class Row:
    """One figure of one rank: measured beside ``costs``'s prediction."""

    label: str
    block: str
    rank: int
    category: str
    measured: int
    predicted: int


def compare(ranks: list[dict]) -> list[Row]:
    """Bytes held and, per phase and collective kind, calls and bytes: every rank, measured beside predicted."""
    rows = []
    for r in ranks:
        c = predicted(r)
        label = costs.grid(r["mode"], r["world_size"], r["depth"]).label
        for cat in ("weight_bytes", "bias_bytes", "activation_bytes"):
            rows.append(Row(label, r["block"], r["rank"], cat, r[cat], getattr(c, cat)))
        for phase in ("forward", "backward"):
            got = costs.comm_table(costs.Collective(*x) for x in r[phase])
            want = c.table(phase)
            for kind in sorted({*got, *want}):
                for what in ("calls", "bytes"):
                    rows.append(Row(label, r["block"], r["rank"], f"{phase} {kind} {what}",
                                    got.get(kind, {}).get(what, 0), want.get(kind, {}).get(what, 0)))
    return rows


def max_error(ranks: list[dict]) -> dict[str, float]:
    """Largest absolute difference from :func:`reference`, per tensor."""
    r0 = ranks[0]
    ref = reference(r0["block"], r0["batch"], r0["hidden"], r0["ffn"], r0["seed"])
    return {k: float((v - ref[k]).abs().max()) for k, v in assemble(ranks).items()}


if __name__ == "__main__":  # torchrun --nproc-per-node 8 -m labkit.intra_layer.multidim
    ldist.main_under_torchrun(run_configs, configs=({"mode": "3d"},), pieces=False)
