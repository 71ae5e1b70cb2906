"""Notebook 03's build-it exercise: Megatron's tensor-parallel linear layers, written as autograd Functions.

Shoeybi et al., "Megatron-LM", 2019, section 3, split an MLP ``fc2(gelu(fc1(x)))`` over t ranks with two
conjugate operators: f (identity forward, all-reduce of the gradient backward) before the column-parallel
``fc1`` (whole output features per rank, so GeLU sees whole values), and g (all-reduce forward, identity
backward) after the row-parallel ``fc2`` (its partial outputs add up). The learner writes f, g, the two
weight splits, the two layers and the MLP in a module file.

The check is split by trust (:mod:`labkit.practice.build.harness`): :func:`draw` picks the shapes and the world
sizes of the run (2, 4 and 3 ranks: a world size hard-coded to 2 shows), :func:`collect`
(:mod:`labkit.practice.build.tp_collect`) runs the learner's module in real gloo ranks and brings back what it
computed and every collective it ran with its size, and :func:`judge`, in this process, computes the dense block
itself and names the bug from the evidence: a gradient ``t`` times the dense one (an extra all-reduce in
backward), one rank's part instead of the sum (a missing all-reduce), an output off by ``(t - 1) * bias`` (the
bias added before the all-reduce), a shard of the 2-way split on 4 ranks (the world size hard-coded), rows
``r, r + t, ...`` (a strided split where the stub asks for a contiguous block).

Values match within ``ATOL`` (float32), not bit for bit: the row layer sums its t partials in another order.
A collective on a view that is not one dense buffer reduces the wrong bytes on gloo (torch 2.13), so f is also
checked on a gradient that is a column slice of a ``torch.cat``'s, the way it arises.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from labkit.practice.build import diagnosis as dg
from labkit.practice.build.harness import BuildExercise, register_build
from labkit.practice.build.tp_collect import (  # noqa: F401 - benchmark and draw: the exercise's API
    TIMEOUT_S,
    WORLDS,
    benchmark,
    collect,
    dense,
    draw,
    probe,
)
from labkit.practice.build.tp_hints import FAILURE_HINTS, case, fault_text
from labkit.practice.coding import Case

KEY = "03.build.tp_layers"
ATOL = 1e-5


def _close(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and torch.allclose(a, b.to(a.dtype), rtol=1e-5, atol=ATOL)


def _reference(params: dict[str, Any]) -> dict[str, torch.Tensor]:
    fc1, fc2, x, weights = dense(params)
    x = x.clone().requires_grad_()
    out = fc2(F.gelu(fc1(x)))
    (out * weights).sum().backward()
    return {"w1": fc1.weight.detach().double(), "b1": fc1.bias.detach().double(), "w2": fc2.weight.detach().double(),
            "b2": fc2.bias.detach().double(), "out": out.detach().double(), "xgrad": x.grad.double(),
            "g_w1": fc1.weight.grad.double(), "g_b1": fc1.bias.grad.double(), "g_w2": fc2.weight.grad.double(),
            "g_b2": fc2.bias.grad.double()}


def _all_reduces(ops: Any) -> list[int]:  # the elements of each all-reduce in a phase's log
    return [int(n) for kind, n in dg.field({"o": ops}, "o", list) if kind == "all_reduce"]


def _f_case(ranks: list, w: int, p: dict) -> tuple[str, str] | None:
    """(detail, bug) of f's checks on ``w`` ranks, or None when they pass."""
    total = w * (w + 1) / 2
    for r, rec in enumerate(ranks):
        part = dg.field(rec, "f", dict)
        if err := fault_text(part):
            return f"rank {r}: f {err}", "raised"
        pr = probe(p, r)
        shape = tuple(pr["fx"].shape)
        if not _close(dg.tensor(part, "y", shape), pr["fx"].double()):
            return f"rank {r}: f's forward changed x (it must be the identity)", "f_forward"
        grad = dg.tensor(part, "grad", shape)
        if len(_all_reduces(part["ops_bwd"])) > 1 or _close(grad, torch.full(shape, total * w)):
            return (f"rank {r}: f's gradient is {w}x the sum over ranks: an extra all-reduce in backward "
                    f"({len(_all_reduces(part['ops_bwd']))} all-reduces where f has one)"), "extra_backward"
        if _close(grad, pr["fgrad"].double()):
            return (f"rank {r}: f's backward does not all-reduce: a missing all-reduce (x.grad is this rank's "
                    "part alone; the column layer's input gradient is the sum of every rank's part)"), "f_missing"
        if not _close(grad, torch.full(shape, total)):
            return f"rank {r}: expected every entry of x.grad to be {total:g} (the sum over ranks)", "f_missing"
        sliced = dg.tensor(part, "sliced_grad", shape)
        if not _close(sliced, pr["fslice"][:, :shape[1]].double() / (r + 1) * total):
            return (f"rank {r}: wrong sums for a gradient that is a column slice of a bigger one: a collective on a "
                    "view that is not one dense buffer reduces the wrong bytes (missing .contiguous() before the "
                    "all-reduce)"), "contiguous"
    return None


def _g_case(ranks: list, w: int, p: dict) -> tuple[str, str] | None:
    total = w * (w + 1) / 2
    for r, rec in enumerate(ranks):
        part = dg.field(rec, "g", dict)
        if err := fault_text(part):
            return f"rank {r}: g {err}", "raised"
        pr = probe(p, r)
        shape = tuple(pr["gx"].shape)
        y = dg.tensor(part, "y", shape)
        if _close(y, pr["gx"].double()):
            return (f"rank {r}: g's forward does not all-reduce: a missing all-reduce (g returned this rank's "
                    "partial sum)"), "g_missing"
        if not _close(y, torch.full(shape, total)):
            return f"rank {r}: expected g(x) to be {total:g} everywhere (the sum over ranks)", "g_missing"
        grad = dg.tensor(part, "grad", shape)
        if _close(grad, pr["ggrad"].double() * w) or _all_reduces(part["ops_bwd"]):
            return (f"rank {r}: g's backward all-reduces too: an extra all-reduce in backward (x.grad is {w}x "
                    "the incoming gradient)"), "extra_backward"
        if not _close(grad, pr["ggrad"].double()):
            return f"rank {r}: g's backward changed the gradient (it must be the identity)", "g_backward"
        base = pr["gbig"] / (r + 1)
        if not (_close(dg.tensor(part, "sliced_y", shape), base[:, :shape[1]].double() * total)
                and _close(dg.tensor(part, "big_after", tuple(base.shape)), pr["gbig"].double())):
            return (f"rank {r}: wrong sums for an input that is a column slice, or the input's buffer changed: "
                    "missing .contiguous() (and a clone) before the all-reduce"), "contiguous"
    return None


def _shard_case(ranks: list, w: int, ref: dict) -> tuple[str, str] | None:
    for r, rec in enumerate(ranks):
        part = dg.field(rec, "shard", dict)
        if err := fault_text(part):
            two = w != 2 and r >= 2 and "IndexError" in err
            return ((f"rank {r} of {w}: world size hard-coded to 2 (it {err})", "hard2") if two
                    else (f"rank {r}: {err}", "raised"))
        got = {k: dg.tensor(part, k) for k in ("col_w", "col_b", "row_w", "row_b")}
        want = {"col_w": ref["w1"].chunk(w, 0)[r], "col_b": ref["b1"].chunk(w, 0)[r],
                "row_w": ref["w2"].chunk(w, 1)[r], "row_b": ref["b2"]}
        bad = [k for k in want if not _close(got[k], want[k])]
        if not bad:
            continue
        if w != 2 and r < 2 and _close(got["col_w"], ref["w1"].chunk(2, 0)[r]):
            return (f"rank {r} of {w} holds half of fc1's rows: world size hard-coded to 2 (a 1/{w} share is "
                    f"{tuple(want['col_w'].shape)})"), "hard2"
        if (got["col_w"].shape == ref["w1"].chunk(w, 1)[r].shape != want["col_w"].shape
                or got["row_w"].shape == ref["w2"].chunk(w, 0)[r].shape != want["row_w"].shape):
            return ("split the wrong dimension: a column-parallel layer keeps whole output features (rows of "
                    "weight [out, in], dim 0), a row-parallel one whole input features (dim 1)"), "wrong_dim"
        if _close(got["col_w"], ref["w1"][r::w]) or _close(got["row_w"], ref["w2"][:, r::w]):
            return (f"rank {r}: a strided split (rows {r}, {r + w}, {r + 2 * w}, ...): the outputs can come out "
                    "right, but the shard must be rank r's contiguous block, weight.chunk(world, dim)[rank], as "
                    "the stub says (a checkpoint or another layer reads shards by block)"), "strided"
        if "row_b" in bad and not _close(got["row_b"], ref["b2"]):
            return (f"rank {r}: row_shard's bias must be the whole bias (added once, after the sum), got shape "
                    f"{tuple(got['row_b'].shape)}"), "row_bias"
        return (f"rank {r}: {', '.join(bad)} differ from rank {r}'s block (expected column weight "
                f"{tuple(want['col_w'].shape)}, row weight {tuple(want['row_w'].shape)})"), "shard"
    return None


def _mlp_cases(ranks: list, w: int, ref: dict) -> list[tuple[str, tuple[str, str] | None]]:
    parts = [dg.field(rec, "mlp", dict) for rec in ranks]
    if errs := [(r, e) for r, p in enumerate(parts) if (e := fault_text(p))]:
        r, e = next(((r, e) for r, e in errs if "another rank" not in e), errs[0])
        bug = ("hard2", f"rank {r} of {w}: world size hard-coded to 2 ({e})") if (
            w != 2 and r >= 2 and "IndexError" in e) else ("raised", f"rank {r}: {e}")  # fmt: skip
        rest = ("the MLP did not run on every rank (the output case says why)", bug[0])
        return [("output", (bug[1], bug[0])), *[(n, rest) for n in ("input gradient", "gradients", "collectives")]]
    shape = tuple(ref["out"].shape)
    outs = [dg.tensor(p, "out", shape) for p in parts]
    out = None
    if not all(_close(o, ref["out"]) for o in outs):
        if all(_close(o, ref["out"] + (w - 1) * ref["b2"]) for o in outs):
            out = (f"the output is the dense one plus {w - 1}x fc2's bias: bias added before the row-parallel "
                   f"all-reduce (counted {w} times)"), "bias_twice"
        elif _close(sum(o - ref["b2"] for o in outs), ref["out"] - ref["b2"]):
            out = ("each rank's output is its own partial sum: g's forward does not all-reduce (a missing "
                   "all-reduce after the row-parallel layer)"), "g_missing"
        else:
            r = next(r for r, o in enumerate(outs) if not _close(o, ref["out"]))
            out = (f"rank {r}: outputs differ from the dense block's beyond {ATOL:g} (largest difference "
                   f"{(outs[r] - ref['out']).abs().max().item():.3g})"), "mlp"
    xg = [dg.tensor(p, "xgrad", tuple(ref["xgrad"].shape)) for p in parts]
    inp = None
    if not all(_close(g, ref["xgrad"]) for g in xg):
        if all(_close(g, ref["xgrad"] * w) for g in xg):
            inp = f"the input gradient is {w}x the dense one: an extra all-reduce in backward", "extra_backward"
        elif _close(sum(xg), ref["xgrad"]):
            inp = ("each rank's input gradient is its own part: f's backward does not all-reduce (a missing "
                   "all-reduce before the column-parallel layer)"), "f_missing"
        else:
            inp = "the input gradient differs from the dense block's", "mlp"
    return [("output", out), ("input gradient", inp), ("parameter gradients", _param_grads(parts, w, ref)),
            ("collectives", _collectives(parts, w, shape))]


def _param_grads(parts: list, w: int, ref: dict) -> tuple[str, str] | None:
    for r, part in enumerate(parts):
        grads = dg.field(part, "grads", dict)
        block = {"fc1.weight": ref["g_w1"].chunk(w, 0)[r], "fc1.bias": ref["g_b1"].chunk(w, 0)[r],
                 "fc2.weight": ref["g_w2"].chunk(w, 1)[r], "fc2.bias": ref["g_b2"]}
        strided = {"fc1.weight": ref["g_w1"][r::w], "fc1.bias": ref["g_b1"][r::w],
                   "fc2.weight": ref["g_w2"][:, r::w], "fc2.bias": ref["g_b2"]}
        missing = [k for k in block if not isinstance(grads.get(k), torch.Tensor)]
        if missing:
            return (f"rank {r}: no gradient for {', '.join(missing)} (parameters must be named fc1.weight, "
                    "fc1.bias, fc2.weight, fc2.bias)"), "names"
        got = {k: dg.tensor(grads, k) for k in block}
        if all(_close(got[k], v) for k, v in block.items()) or all(_close(got[k], v) for k, v in strided.items()):
            continue
        twice = [k for k in block if _close(got[k], block[k] * w)]
        if twice:
            return (f"rank {r}: {', '.join(twice)} gradients are {w}x the dense ones: an extra all-reduce in "
                    "backward"), "extra_backward"
        return f"rank {r}: gradients of {', '.join(k for k in block if not _close(got[k], block[k]))} differ", "mlp"
    return None


def _collectives(parts: list, w: int, shape: tuple[int, ...]) -> tuple[str, str] | None:
    """One all-reduce of tokens x h forward (g), one backward (f): Shoeybi et al.'s two per MLP."""
    n = shape[0] * shape[1]
    for r, part in enumerate(parts):
        fwd, bwd = _all_reduces(part["ops_fwd"]), _all_reduces(part["ops_bwd"])
        if len(bwd) > 1:
            return (f"rank {r}: {len(bwd)} all-reduces in backward where Megatron's MLP has one (f's): an extra "
                    "all-reduce in backward"), "extra_backward"
        if not fwd or not bwd:
            side = "forward (g)" if not fwd else "backward (f)"
            return f"rank {r}: no all-reduce in {side}: a missing all-reduce", "g_missing" if not fwd else "f_missing"
        if fwd != [n] or bwd != [n]:
            return (f"rank {r}: all-reduced {fwd} elements forward and {bwd} backward; Megatron's MLP all-reduces "
                    f"tokens x h = {n} each way"), "mlp"
    return None


def judge(record: dict[str, Any], params: dict[str, Any]) -> list[Case]:
    """(TRUSTED side.) The cases of one record: each check passes when it passes on every rank of every world size."""
    ref, runs = _reference(params), dg.field(record, "runs", list)
    worlds = [int(w) for w in params["worlds"]]
    found: dict[str, list[tuple[int, tuple[str, str]]]] = {}
    names = ["f: identity forward, all-reduce of the gradient backward", "g: all-reduce forward, identity backward",
             "column_shard and row_shard: rank r's contiguous block", "MLP: output equals the dense block",
             "MLP: input gradient equals the dense one", "MLP: weight and bias gradients equal the dense shards",
             "MLP: one all-reduce of tokens x h forward, one backward"]
    for i, w in enumerate(worlds):
        if i >= len(runs):
            return [case(n, False, "not run (an earlier world size hung or crashed)", "raised") for n in names]
        run = dg.field(runs, i, dict)
        if dg.field(run, "world", int) != w:
            raise dg.BadRecord(f"run {i} is of world {run.get('world')}, expected {w}")
        if stop := dg.failure_case(run, f"the checks run on {w} ranks within {TIMEOUT_S:g} s", FAILURE_HINTS):
            return [stop]
        ranks = dg.ranks_of(run, w)
        results = [_f_case(ranks, w, params), _g_case(ranks, w, params), _shard_case(ranks, w, ref),
                   *[v for _, v in _mlp_cases(ranks, w, ref)]]
        for name, res in zip(names, results, strict=True):
            if res is not None:
                found.setdefault(name, []).append((w, res))
    on = ", ".join(str(w) for w in worlds[:-1]) + f" and {worlds[-1]}" if len(worlds) > 1 else str(worlds[0])
    out = []
    for name in names:
        bad = found.get(name)
        if not bad:
            out.append(case(f"{name} (on {on} ranks)", True, "", "mlp"))
            continue
        w, (detail, bug) = bad[0]
        only = [x for x, _ in bad]
        if bug not in ("hard2",) and 2 not in only and any(b == "hard2" for v in found.values() for _, (_, b) in v):
            bug, detail = "hard2", f"passes on 2 ranks, fails on {w} (world size hard-coded to 2): {detail}"
        out.append(case(f"{name} (on {on} ranks)", False, f"on {w} ranks, {detail}", bug))
    return out


register_build(BuildExercise(
    key=KEY, stub="tp_layers.py",
    task="In build/tp_layers.py write Megatron's f (CopyToParallel) and g (ReduceFromParallel) as "
         "torch.autograd.Function, column_shard(weight, bias, rank, world) and row_shard(...) (rank's contiguous "
         "block: weight.chunk(world, dim)[rank]), ColumnParallelLinear, RowParallelLinear and ParallelMLP(fc1, "
         "fc2, rank, world) (parameters fc1.weight, fc1.bias, fc2.weight, fc2.bias). Checked on 2, 4 and 3 gloo "
         "ranks with shapes drawn per run: outputs and gradients equal the dense block within 1e-5, one all-reduce "
         "each way.",
    hint=("Which operator needs a collective in forward, and which in backward? Megatron pairs them as conjugates.",
          "f: identity forward, all-reduce backward (before the column layer); g: all-reduce forward, identity "
          "backward (after the row layer)."),
    worked="f.forward returns x; f.backward all-reduces grad.contiguous().clone(). g.forward all-reduces a "
           "contiguous clone of x; g.backward returns grad. column_shard keeps weight.chunk(world, 0)[rank] and the "
           "matching bias entries; row_shard keeps weight.chunk(world, 1)[rank] and the whole bias. "
           "ColumnParallelLinear computes F.linear(f(x), w, b); RowParallelLinear computes g(F.linear(x, w)) + b "
           "(the bias after the sum); ParallelMLP is fc2(gelu(fc1(x))) on them.",
    draw=draw, collect=collect, judge=judge,
))
