"""One run of a mode on local ranks: the data from one seed, the measurement, the blocks put back together."""

from __future__ import annotations

import os
import time
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F

from labkit import dist as ldist
from labkit.errors import require_choice
from labkit.intra_layer import costs
from labkit.intra_layer.multidim.collectives import CollectiveLog
from labkit.intra_layer.multidim.layers import linear, mlp
from labkit.intra_layer.multidim.mesh import Mesh, build_mesh

MODES, BLOCKS = costs.MODES, costs.BLOCKS


DEFAULTS = {"block": "mlp", "batch": 16, "hidden": 16, "ffn": 64, "depth": 1, "seed": 0}


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
