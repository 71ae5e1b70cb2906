"""The untrusted side of 03.build.tp_layers: the learner's module run in real gloo ranks, returned as raw records.

Each rank loads the module, runs its f and g on probe tensors (also a sliced, non-contiguous one), cuts its shards
of the dense layers and runs the parallel MLP's forward and backward, logging every collective with its size
(:class:`labkit.practice.build.rank_record.CollectiveLog`). Nothing here compares or decides: the judge in
:mod:`labkit.practice.build.tp_layers` does, in the trusted process.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn

from labkit.practice.build import records
from labkit.practice.build.rank_record import CollectiveLog, all_agree, attempt, sync
from labkit.practice.build.records import load_module

WORLDS = (2, 4, 3)  # 3: a world size a module written for powers of two, or for 2, does not expect
TIMEOUT_S = 6.0  # a world's checks take well under a second once started; a hang is stopped here


def draw(seed: int) -> dict[str, Any]:
    """Shapes that every world size in the run divides (ffn a multiple of 12), the rest drawn per run."""
    rng = random.Random(seed)
    return {"h": rng.choice((8, 12, 16, 20)), "ffn": 12 * rng.randint(2, 5), "tokens": rng.randint(5, 9),
            "worlds": list(WORLDS)}


def gen(params: dict[str, Any], salt: int) -> torch.Generator:
    return torch.Generator().manual_seed(int(params["seed"]) * 101 + salt)


def dense(params: dict[str, Any]) -> tuple[nn.Linear, nn.Linear, torch.Tensor, torch.Tensor]:
    """The dense MLP's two layers, its input and the loss weights: the same in every rank and in the judge."""
    h, ffn, tokens = int(params["h"]), int(params["ffn"]), int(params["tokens"])
    torch.manual_seed(int(params["seed"]))
    fc1, fc2 = nn.Linear(h, ffn), nn.Linear(ffn, h)
    with torch.no_grad():
        fc2.bias.normal_()  # a bias that shows when it is added more than once
    return fc1, fc2, torch.randn(tokens, h, generator=gen(params, 1)), torch.randn(tokens, h, generator=gen(params, 3))


def probe(params: dict[str, Any], rank: int) -> dict[str, torch.Tensor]:
    """The probe tensors of f and g (rank-dependent where the collective must sum over ranks)."""
    t, h = int(params["tokens"]), int(params["h"])
    base = torch.arange(t * (h + 3), dtype=torch.float32).view(t, h + 3)
    return {"fx": torch.randn(t, h, generator=gen(params, 5)), "fgrad": torch.full((t, h), float(rank + 1)),
            "fslice": base * (rank + 1), "gx": torch.full((t, h), float(rank + 1)),
            "ggrad": torch.randn(t, h, generator=gen(params, 7)), "gbig": base * (rank + 1)}


def _f(m, p: dict[str, torch.Tensor], h: int) -> dict[str, Any]:
    x = p["fx"].clone().requires_grad_()
    with CollectiveLog() as fwd:
        y = m.CopyToParallel.apply(x)
    with CollectiveLog() as bwd:
        y.backward(p["fgrad"])
    x2 = p["fx"].clone().requires_grad_()
    z = torch.cat([m.CopyToParallel.apply(x2), torch.zeros(x2.shape[0], 3)], dim=1)  # f's grad: a slice of z's
    z.backward(p["fslice"])
    return {"y": y.detach(), "grad": x.grad, "sliced_grad": x2.grad, "ops_fwd": fwd.ops, "ops_bwd": bwd.ops}


def _g(m, p: dict[str, torch.Tensor], h: int) -> dict[str, Any]:
    x = p["gx"].clone().requires_grad_()
    with CollectiveLog() as fwd:
        y = m.ReduceFromParallel.apply(x)
    with CollectiveLog() as bwd:
        y.backward(p["ggrad"])
    big = p["gbig"].clone()
    y2 = m.ReduceFromParallel.apply(big[:, :h])
    return {"y": y.detach(), "grad": x.grad, "sliced_y": y2.detach(), "big_after": big,
            "ops_fwd": fwd.ops, "ops_bwd": bwd.ops}


def _shards(m, params: dict[str, Any], rank: int, world: int) -> dict[str, Any]:
    fc1, fc2, _, _ = dense(params)
    cw, cb = m.column_shard(fc1.weight.detach().clone(), fc1.bias.detach().clone(), rank, world)
    rw, rb = m.row_shard(fc2.weight.detach().clone(), fc2.bias.detach().clone(), rank, world)
    return {"col_w": torch.as_tensor(cw), "col_b": torch.as_tensor(cb), "row_w": torch.as_tensor(rw),
            "row_b": torch.as_tensor(rb)}


def _mlp(path: str, m, params: dict[str, Any], rank: int, world: int) -> dict[str, Any]:
    fc1, fc2, x, weights = dense(params)
    built = attempt(path, lambda: {"mlp": m.ParallelMLP(fc1, fc2, rank, world)})
    if not all_agree("mlp" in built):  # a rank that failed to build would leave the others in a collective alone
        return built if "mlp" not in built else {"fault": "peer", "error": "another rank failed to build its MLP"}
    mlp = built["mlp"]

    def step() -> dict[str, Any]:
        xi = x.clone().requires_grad_()
        with CollectiveLog() as fwd:
            out = mlp(xi)
        with CollectiveLog() as bwd:
            (out * weights).sum().backward()
        grads = {k: (v.grad.detach().clone() if v.grad is not None else None) for k, v in mlp.named_parameters()}
        return {"out": out.detach(), "xgrad": xi.grad, "grads": grads, "ops_fwd": fwd.ops, "ops_bwd": bwd.ops}

    return attempt(path, step)


def _one(path: str, rank: int, world: int, params: dict[str, Any]) -> dict[str, Any]:
    loaded = attempt(path, lambda: {"m": load_module(path)})
    if "m" not in loaded:
        return {"load": loaded}
    m, p, h = loaded["m"], probe(params, rank), int(params["h"])
    rec: dict[str, Any] = {}
    for part, fn in (("f", lambda: _f(m, p, h)), ("g", lambda: _g(m, p, h)),
                     ("shard", lambda: _shards(m, params, rank, world))):
        rec[part] = attempt(path, fn)
        sync()  # the next part starts together on every rank
    rec["mlp"] = _mlp(path, m, params, rank, world)
    sync()
    return rec


def tp_rank(rank: int, world: int, log: records.OpLog, path: str, params: dict[str, Any],
            paths: list[str]) -> list[dict[str, Any]]:
    """(Runs in a rank.) One record per module in ``paths``, each torch.distributed call logged."""
    torch.manual_seed(1234 + rank)
    with records.recording(log):
        return [_one(p, rank, world, params) for p in paths]


def collect_many(paths: list[Path], params: dict[str, Any]) -> list[dict[str, Any]]:
    """One record per module, one launch per world size for all of them (:func:`records.grouped`)."""
    return records.grouped(tp_rank, paths, params, TIMEOUT_S)


def collect(path: Path, params: dict[str, Any]) -> dict[str, Any]:
    """The raw record of the learner's module at ``path``: every world size's ranks, or the fault of a launch."""
    return collect_many([path], params)[0]


def bench_rank(rank: int, world: int, log: records.OpLog, path: str, params: dict[str, Any],
               steps: int = 20) -> dict:
    """(Runs in a rank.) Seconds and all-reduced elements per forward+backward: the learner's MLP, then DTensor's."""
    import time

    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    fc1, fc2, x, _ = dense(params)
    mine = load_module(path).ParallelMLP(fc1, fc2, rank, world)
    theirs = parallelize_module(nn.Sequential(fc1, nn.GELU(approximate="none"), fc2),
                                init_device_mesh("cpu", (world,)), {"0": ColwiseParallel(), "2": RowwiseParallel()})
    out = {}
    for label, model in (("yours", mine), ("torch DTensor", theirs)):
        with CollectiveLog() as ops:
            model(x.clone().requires_grad_()).sum().backward()
        t0 = time.perf_counter()
        for _ in range(steps):
            model(x.clone().requires_grad_()).sum().backward()
        out[label] = {"seconds": (time.perf_counter() - t0) / steps,
                      "bytes": 4 * sum(n for kind, n in ops.ops if kind == "all_reduce")}
    return out


def benchmark(path: str | Path, world: int = 2, steps: int = 20, seed: int = 0) -> list[dict]:
    """Your MLP beside torch's DTensor tensor parallel: seconds per step (shown, never asserted: the ranks share
    this machine's cores) and bytes all-reduced, predicted 2 * tokens * h * 4 (one all-reduce of the MLP's output
    forward, one of its input's gradient backward; Shoeybi et al. 2019, section 3)."""
    params = {**draw(seed), "seed": seed}
    got = records.ranks(bench_rank, world, path, timeout=60.0, params=params, steps=steps)
    if "ranks" not in got:
        return [{"engine": "yours", "error": str(got.get("failure", {}).get("message", ""))}]
    rows = got["ranks"][0]
    return [{"engine": k, "seconds per step": float(v["seconds"]), "bytes all-reduced": int(v["bytes"]),
             "predicted bytes": 2 * int(params["tokens"]) * int(params["h"]) * 4} for k, v in rows.items()]
