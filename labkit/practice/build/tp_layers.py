"""Notebook 03's build-it exercise: Megatron's tensor-parallel linear layers, written as autograd Functions.

Shoeybi et al., "Megatron-LM", 2019, section 3, split an MLP ``fc2(gelu(fc1(x)))`` over t ranks with two
conjugate operators: f (identity forward, all-reduce of the gradient backward) before the column-parallel
``fc1`` (whole output features per rank, so GeLU sees whole values), and g (all-reduce forward, identity
backward) after the row-parallel ``fc2`` (its partial outputs add up). The learner writes f, g, the two
weight splits, the two layers and the MLP in a module file; every check runs in real ranks of a gloo group
(:mod:`labkit.dist`) beside the dense ``nn.Linear`` block, and the benchmark beside torch's own DTensor
``ColwiseParallel``/``RowwiseParallel``.

Outputs and gradients match the dense block within ``ATOL`` (float32), not bit for bit: the row-parallel
layer adds its t partial sums in another order than one dense matmul does.

A collective on a view that is not one dense buffer (a column slice of a tensor) silently reduces the wrong
bytes on gloo (measured with torch 2.13: a sliced ``all_reduce`` wrote sums into the neighbouring elements);
a transposed view is dense and survives. The sliced-gradient case is built the way it arises: a ``torch.cat``
after f hands f's backward a slice of the concatenated gradient.
"""

from __future__ import annotations

import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

from labkit.practice.build.harness import BuildExercise, launch, load_module, register_build
from labkit.practice.coding import Case

KEY = "03.build.tp_layers"
H, FFN, TOKENS = 16, 64, 8  # the dense MLP: 16 -> 64 -> 16, 2,128 parameters
ATOL = 1e-5
WORLDS = (2,)


def _close(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and torch.allclose(a, b, rtol=0.0, atol=ATOL)


def _dense(seed: int = 0) -> tuple[nn.Linear, nn.Linear, torch.Tensor]:
    torch.manual_seed(seed)
    return nn.Linear(H, FFN), nn.Linear(FFN, H), torch.randn(TOKENS, H)


def _f_cases(m, rank: int, world: int) -> list[tuple[str, bool, str]]:
    """f alone: forward identity, backward sums every rank's gradient (contiguous, then a sliced one)."""
    out = []
    x = torch.randn(TOKENS, H, requires_grad=True)
    y = m.CopyToParallel.apply(x)
    out.append(("f: forward is the identity", torch.equal(y, x), "f(x) differs from x"))
    mine = torch.full((TOKENS, H), float(rank + 1))
    y.backward(mine)
    total = world * (world + 1) / 2
    got = x.grad
    detail = ("x.grad is this rank's gradient alone: f's backward does not all-reduce (the column layer's input "
              "gradient misses the other ranks' parts)" if torch.equal(got, mine) else
              f"expected every entry to be {total:g} (the sum over ranks), got {got.flatten()[0].item():g}")
    out.append(("f: backward all-reduces (sums) the gradient", torch.equal(got, torch.full_like(got, total)), detail))
    x2 = torch.randn(TOKENS, H, requires_grad=True)
    z = torch.cat([m.CopyToParallel.apply(x2), torch.zeros(TOKENS, 3)], dim=1)  # f's grad is a slice of z's
    z.backward(torch.arange(TOKENS * (H + 3), dtype=torch.float32).view(TOKENS, H + 3) * (rank + 1))
    want = torch.arange(TOKENS * (H + 3), dtype=torch.float32).view(TOKENS, H + 3)[:, :H] * total
    ok = x2.grad is not None and torch.equal(x2.grad, want)
    alone = x2.grad is not None and torch.equal(x2.grad, want / total * (rank + 1))
    out.append(("f: backward on a sliced (non-contiguous) gradient", ok,
                "x.grad is this rank's gradient alone: not all-reduced" if alone else
                "wrong sums for a gradient that is a column slice: a collective on a view that is not one dense "
                "buffer reduces the wrong bytes (missing .contiguous() before the all-reduce)"))
    return out


def _g_cases(m, rank: int, world: int) -> list[tuple[str, bool, str]]:
    """g alone: forward sums every rank's input (also a sliced one), backward passes the gradient unchanged."""
    out = []
    x = torch.full((TOKENS, H), float(rank + 1), requires_grad=True)
    y = m.ReduceFromParallel.apply(x)
    total = world * (world + 1) / 2
    out.append(("g: forward all-reduces (sums)", torch.equal(y, torch.full_like(y, total)),
                f"expected {total:g} everywhere (the sum over ranks), got {y.flatten()[0].item():g}"))
    grad = torch.randn(TOKENS, H, generator=torch.Generator().manual_seed(7))  # the same on every rank
    y.backward(grad)
    doubled = torch.equal(x.grad, grad * world)
    out.append(("g: backward is the identity", torch.equal(x.grad, grad),
                f"x.grad is {world}x the gradient: g's backward all-reduces too (reduced in both directions, the "
                "gradients multiplied by the world size)" if doubled else "x.grad differs from the incoming grad"))
    base = torch.arange(TOKENS * (H + 3), dtype=torch.float32).view(TOKENS, H + 3)
    big = base * (rank + 1)
    before = big.clone()
    y2 = m.ReduceFromParallel.apply(big[:, :H])
    ok = torch.equal(y2, base[:, :H] * total) and torch.equal(big, before)
    out.append(("g: forward on a sliced (non-contiguous) input", ok,
                "wrong sums, or the input's buffer changed: an all-reduce on a view that is not one dense buffer "
                "reduces the wrong bytes (missing .contiguous(), or a reduction in place on the input)"))
    return out


def _shard_cases(m, rank: int, world: int) -> list[tuple[str, bool, str]]:
    fc1, fc2, _ = _dense()
    w, b = fc1.weight.detach(), fc1.bias.detach()
    got = m.column_shard(w, b, rank, world)
    want = (w.chunk(world, 0)[rank], b.chunk(world, 0)[rank])
    wrong = got[0].shape == w.chunk(world, 1)[rank].shape
    out = [("column_shard keeps whole output features (rows of weight)",
            _close(got[0], want[0]) and _close(got[1], want[1]),
            "split the wrong dimension: the weight's input features (dim 1) were split; a column-parallel layer "
            "keeps whole output features, rows of weight [out, in] (dim 0), and their bias entries" if wrong else
            f"expected weight {tuple(want[0].shape)} and bias {tuple(want[1].shape)}: rank {rank}'s block of rows")]
    w2, b2 = fc2.weight.detach(), fc2.bias.detach()
    got = m.row_shard(w2, b2, rank, world)
    wrong = got[0].shape == w2.chunk(world, 0)[rank].shape
    out.append(("row_shard keeps whole input features (columns of weight), the bias whole",
                _close(got[0], w2.chunk(world, 1)[rank]) and _close(got[1], b2),
                "split the wrong dimension: a row-parallel layer splits the input features (dim 1), matching the "
                "column layer's output" if wrong else "expected rank's block of columns and the whole bias"))
    return out


def _mlp_cases(m, rank: int, world: int) -> list[tuple[str, bool, str]]:
    fc1, fc2, x = _dense()
    x1, x2 = x.clone().requires_grad_(), x.clone().requires_grad_()
    dense = fc2(F.gelu(fc1(x1)))
    dense.square().sum().backward()
    mlp = m.ParallelMLP(fc1, fc2, rank, world)
    out = mlp(x2)
    name = f"MLP on {world} ranks"
    if not _close(out, dense):
        return [(f"{name}: output equals the dense block", False, "outputs differ beyond the float tolerance "
                 f"{ATOL:g} (shape {tuple(out.shape)}, dense {tuple(dense.shape)})")]
    out.square().sum().backward()
    res = [(f"{name}: output equals the dense block", True, "")]
    g = x2.grad
    res.append((f"{name}: input gradient equals the dense one", g is not None and _close(g, x1.grad),
                f"the input gradient is {world}x the dense one (a gradient reduced twice)" if g is not None
                and _close(g, x1.grad * world) else "the input gradient differs from the dense block's: is every "
                "rank's part of it summed (f's backward)?"))
    params = dict(mlp.named_parameters())
    want = {"fc1.weight": fc1.weight.grad.chunk(world, 0)[rank], "fc1.bias": fc1.bias.grad.chunk(world, 0)[rank],
            "fc2.weight": fc2.weight.grad.chunk(world, 1)[rank], "fc2.bias": fc2.bias.grad}
    bad = [k for k, v in want.items() if k not in params or params[k].grad is None or not _close(params[k].grad, v)]
    twice = [k for k in bad if k in params and params[k].grad is not None and _close(params[k].grad, want[k] * world)]
    res.append((f"{name}: weight and bias gradients equal the dense block's shards", not bad,
                f"{', '.join(twice)} gradients are {world}x the dense ones (a gradient reduced twice)" if twice else
                f"wrong or missing gradients: {', '.join(bad)} (parameters must be named fc1.weight, fc1.bias, "
                "fc2.weight, fc2.bias)"))
    return res


def rank_checks(rank: int, world: int, path: str, parts: tuple[str, ...] = ("f", "g", "shard", "mlp")) -> list:
    """(Runs in a rank.) Every case of the learner's module at ``path``: (name, ok, detail) tuples."""
    m = load_module(path)
    torch.manual_seed(1234 + rank)
    checks = {"f": _f_cases, "g": _g_cases, "shard": _shard_cases, "mlp": _mlp_cases}
    out = []
    for part in parts:
        try:
            out += checks[part](m, rank, world)
        except NotImplementedError:
            raise
        except Exception as err:  # noqa: BLE001 - the learner's code may raise anything; name it per part
            out.append((f"{part}: runs", False, f"raised {type(err).__name__}: {err}"))
        dist.barrier()  # the next part starts together on every rank
    return out


HINTS = {
    "f: backward all-reduces": ("f's input x is the same on every rank; each rank's copy of it feeds a different "
                                "slice of the output. What is the gradient of x, then?",
                                "In CopyToParallel.backward, all-reduce (sum) the gradient before returning it."),
    "g: backward is the identity": ("The forward of g is a sum over ranks. What does the gradient of a sum "
                                    "send to each of its terms?", "ReduceFromParallel.backward returns grad as it is."),
    "sliced": ("Is the tensor you hand to the collective one dense buffer? A column slice of a bigger tensor is not.",
               "Call .contiguous() (and clone, to leave autograd's buffers alone) before dist.all_reduce."),
    "shard": ("nn.Linear stores weight as [out_features, in_features]. Which dimension holds the outputs?",
              "Column-parallel: weight.chunk(world, dim=0)[rank]; row-parallel: weight.chunk(world, dim=1)[rank]."),
}


def _hints(name: str) -> tuple[str, ...]:
    key = "sliced" if "sliced" in name else "shard" if "_shard" in name else name.split(" (")[0]
    return next((v for k, v in HINTS.items() if key.startswith(k)), ())


def run(path: Path, worlds: tuple[int, ...] = WORLDS) -> list[Case]:
    """Grade the module at ``path`` on each world size in ``worlds``: a case passes when it passes on every rank."""
    cases: list[Case] = []
    for world in worlds:
        results, failed = launch(rank_checks, world, path, what="the checks run", timeout=30.0 * world)
        if failed:
            return cases + [failed]
        for i, (name, _, _) in enumerate(results[0]):
            bad = [(r, res[i][2]) for r, res in enumerate(results) if not res[i][1]]
            label = name if len(worlds) == 1 else f"{name} [{world} ranks]"
            detail = f"rank {bad[0][0]}: {bad[0][1]}" if bad else ""
            cases.append(Case(label, not bad, detail, _hints(name)))
    return cases


def bench_rank(rank: int, world: int, path: str, steps: int = 20) -> dict:
    """(Runs in a rank.) Seconds and all-reduced bytes per forward+backward: the learner's MLP, then DTensor's."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    from labkit.intra_layer.megatron.observe import CollectiveCounter

    fc1, fc2, x = _dense()
    mine = load_module(path).ParallelMLP(fc1, fc2, rank, world)
    theirs = parallelize_module(nn.Sequential(fc1, nn.GELU(approximate="none"), fc2),
                                init_device_mesh("cpu", (world,)), {"0": ColwiseParallel(), "2": RowwiseParallel()})
    out = {}
    for label, model in (("yours", mine), ("torch DTensor", theirs)):
        xi = x.clone().requires_grad_()
        with CollectiveCounter() as counter:
            model(xi).sum().backward()
        t0 = time.perf_counter()
        for _ in range(steps):
            model(x.clone().requires_grad_()).sum().backward()
        out[label] = {"seconds": (time.perf_counter() - t0) / steps, "comm": counter.table()}
    return out


def benchmark(path: str | Path, world: int = 2, steps: int = 20) -> list[dict]:
    """Your MLP beside torch's DTensor tensor parallel: seconds per step (shown, never asserted) and bytes sent.

    Predicted bytes all-reduced per step: 2 * tokens * h * 4 (one all-reduce of the MLP's output in forward,
    one of its input's gradient in backward; Shoeybi et al. 2019, section 3).
    """
    per_rank = launch(bench_rank, world, path, what="the benchmark runs", steps=steps)
    if per_rank[1] is not None:
        return [{"engine": "yours", "error": per_rank[1].detail}]
    rows = per_rank[0][0]
    return [{"engine": k, "seconds per step": v["seconds"],
             "bytes all-reduced": sum(c["bytes"] for c in v["comm"].values()),
             "predicted bytes": 2 * TOKENS * H * 4} for k, v in rows.items()]


register_build(BuildExercise(
    KEY,
    "tp_layers.py",
    "In build/tp_layers.py write Megatron's f (CopyToParallel) and g (ReduceFromParallel) as "
    "torch.autograd.Function, column_shard(weight, bias, rank, world) and row_shard(...), ColumnParallelLinear, "
    "RowParallelLinear and ParallelMLP(fc1, fc2, rank, world) (parameters fc1.weight, fc1.bias, fc2.weight, "
    "fc2.bias). Checked on 2 gloo ranks: outputs and gradients equal the dense block within 1e-5.",
    run,
    ("Which operator needs a collective in forward, and which in backward? Megatron pairs them as conjugates.",
     "f: identity forward, all-reduce backward (before the column layer); g: all-reduce forward, identity "
     "backward (after the row layer)."),
    "f.forward returns x; f.backward all-reduces grad.contiguous().clone(). g.forward all-reduces a contiguous "
    "clone of x; g.backward returns grad. column_shard keeps weight.chunk(world, 0)[rank] and the matching bias "
    "entries; row_shard keeps weight.chunk(world, 1)[rank] and the whole bias. ColumnParallelLinear computes "
    "F.linear(f(x), w, b); RowParallelLinear computes g(F.linear(x, w)) + b; ParallelMLP is "
    "fc2(gelu(fc1(x))) on them.",
))
