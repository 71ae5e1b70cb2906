"""Notebook 03's second build-it exercise: one transformer layer with tensor and sequence parallelism.

Korthikanti et al., "Reducing Activation Recomputation in Large Transformer Models", 2022, section 4.2.2: the
LayerNorms, residual adds and dropout run on s/t tokens per rank; g all-gathers the sequence before each
column-parallel linear (QKV, the MLP's first) and reduce-scatters in backward; g-bar reduce-scatters after each
row-parallel linear (attention's and the MLP's projections) and all-gathers in backward. The bytes on the wire are
Megatron's two all-reduces (an all-reduce is a reduce-scatter plus an all-gather), and the activations outside
the linears are cut by t. The learner writes g, g-bar and ``SequenceParallelBlock`` (whole heads per rank, as
:mod:`labkit.intra_layer.megatron` splits them) for labkit's :class:`labkit.rig.model.Block`.

Split by trust (:mod:`labkit.practice.build.harness`): :func:`draw` picks the shapes (heads, width, sequence and
batch that 2 and 4 divide); :func:`collect` (:mod:`labkit.practice.build.sp_collect`) runs the learner's module in
gloo ranks; :func:`judge` runs the dense layer itself and names the bug from the evidence: g-bar's output holding
every token, or an all-reduce in its collectives (an all-reduce where sequence parallelism reduce-scatters); g's
output of shape (b t, s/t, h) (gathered along the batch); g's gradient of this rank alone (its backward does not
reduce-scatter); the QKV shard equal to a contiguous block of rows (q rows of several heads instead of q, k and v
of its own); LayerNorm gradients whose sum over ranks is the dense one (not all-reduced); the output of a layer
whose row-parallel bias counts t times (bias added before the reduce-scatter). Values agree within ``ATOL``: the
ranks sum partial products in another order than one matmul does.
"""

from __future__ import annotations

import random
from typing import Any

import torch

from labkit.practice.build import diagnosis as dg
from labkit.practice.build.harness import BuildExercise, register_build
from labkit.practice.build.sp_collect import TIMEOUT_S, collect, layer, probe
from labkit.practice.build.tp_hints import FAILURE_HINTS, case, fault_text
from labkit.practice.coding import Case

KEY = "03.build.sp_block"
ATOL = 1e-4
NAMES = ("g (GatherSequence): all-gather along the sequence forward, reduce-scatter backward",
         "g-bar (ReduceScatterSequence): reduce-scatter forward, all-gather backward",
         "layer: parameters are this rank's shards (whole heads, contiguous MLP blocks)",
         "layer: output equals the dense layer's for this rank's tokens",
         "layer: input gradient equals the dense one for this rank's tokens",
         "layer: gradients equal the dense layer's shards after allreduce_replicated_grads",
         "layer: 2 all-gathers and 2 reduce-scatters of b x s x h each way, no all-reduce")


def draw(seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    heads = 4 * rng.choice((1, 2))
    return {"n_head": heads, "d_model": heads * rng.choice((2, 3, 4)), "seq": 4 * rng.randint(2, 4),
            "batch": rng.randint(1, 2), "worlds": [2, 4]}


def _close(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and torch.allclose(a, b.to(a.dtype), rtol=1e-4, atol=ATOL)


def _dense(params: dict[str, Any], scale: tuple[float, float] = (1.0, 1.0)) -> dict[str, Any]:
    """The dense layer's output and gradients; ``scale`` multiplies the two row-parallel biases (a diagnosis)."""
    block, x, w = layer(params)
    with torch.no_grad():
        block.attn.c_proj.bias.mul_(scale[0])
        block.mlp.c_proj.bias.mul_(scale[1])
    x = x.requires_grad_()
    out = block(x)
    (out * w).sum().backward()
    return {"out": out.detach().double(), "xgrad": x.grad.double(),
            "params": {k: v.detach().double() for k, v in block.named_parameters()},
            "grads": {k: v.grad.double() for k, v in block.named_parameters()}}


def shard(name: str, t: torch.Tensor, rank: int, world: int, h: int) -> torch.Tensor:
    """Rank ``rank``'s part of the dense parameter (or gradient) ``name``: Megatron's layout, whole heads."""
    width = h // world
    if name.startswith("attn.c_attn"):
        rows = torch.cat([torch.arange(width) + j * h + rank * width for j in range(3)])  # q, k, v of its heads
        return t[rows]
    if name == "attn.c_proj.weight":
        return t[:, rank * width:(rank + 1) * width]
    if name.startswith("mlp.c_fc"):
        return t.chunk(world, 0)[rank]
    if name == "mlp.c_proj.weight":
        return t.chunk(world, 1)[rank]
    return t  # LayerNorms and the row-parallel biases: replicated


def _count(ops: Any, kind: str) -> list[int]:
    return [int(n) for k, n in dg.field({"o": ops}, "o", list) if k == kind]


def _g(parts: list, w: int, p: dict) -> tuple[str, str] | None:
    total = w * (w + 1) / 2
    for r, pr in enumerate(parts):
        if err := fault_text(pr):
            return f"rank {r}: {err}", "raised"
        b, s, h = p["base"].shape
        y = dg.tensor(pr, "gather")
        if y.shape == (b * w, s // w, h):
            return ("g's output has shape (b t, s/t, h): gathered along the batch (dim 0), not the sequence "
                    "(dim 1)"), "sp_gather"
        if not _close(y, p["base"].double()):
            return f"rank {r}: g's output is not every rank's tokens in rank order, shape (b, s, h)", "sp_gather"
        grad, mine = dg.tensor(pr, "gather_grad"), p["base2"].chunk(w, 1)[r].double()  # absent: failed above
        if _close(grad, mine * (r + 1)):
            return (f"rank {r}: g's backward does not reduce-scatter: it keeps this rank's slice of its own "
                    "gradient (the sum over ranks is missing)"), "sp_gather"
        if not _close(grad, mine * total):
            return f"rank {r}: g's input gradient is not the sum over ranks of this rank's slice", "sp_gather"
    return None


def _gbar(parts: list, w: int, p: dict) -> tuple[str, str] | None:
    total = w * (w + 1) / 2
    for r, pr in enumerate(parts):
        if err := fault_text(pr):
            return f"rank {r}: {err}", "raised"
        if "rs" not in pr:
            return "not run: g's output has the wrong shape (see g's case)", "sp_gather"
        z, want = dg.tensor(pr, "rs"), p["base"].chunk(w, 1)[r].double() * total
        if _count(pr["ops_rs"], "all_reduce") or _close(z, p["base"].double() * total):
            return ("an all-reduce where sequence parallelism reduce-scatters: every rank summed every token "
                    "(twice the bytes of a reduce-scatter, and s tokens kept instead of s/t)"), "sp_scatter"
        if not _close(z, want):
            return f"rank {r}: g-bar's output is not the sum over ranks of this rank's tokens", "sp_scatter"
        if not _close(dg.tensor(pr, "rs_grad"), p["base2"].double()):
            return f"rank {r}: g-bar's input gradient is not every rank's gradient, all-gathered", "sp_scatter"
    return None


def _layer(parts: list, w: int, params: dict, ref: dict) -> list[tuple[str, str] | None]:
    if errs := [(r, e) for r, p in enumerate(parts) if (e := fault_text(p))]:
        r, e = next(((r, e) for r, e in errs if "another rank" not in e), errs[0])
        rest = ("the layer did not run on every rank (see the output case)", "raised")
        return [None, (f"rank {r}: {e}", "raised"), rest, rest, rest]
    h = int(params["d_model"])
    pars = [dg.field(p, "params", dict) for p in parts]
    shards = None
    for r, got in enumerate(pars):
        want = {k: shard(k, v, r, w, h) for k, v in ref["params"].items()}
        if (bad := [k for k in want if not isinstance(got.get(k), torch.Tensor) or not _close(
                dg.tensor(got, k), want[k])]):  # fmt: skip
            qkv = got.get("attn.c_attn.weight")
            if isinstance(qkv, torch.Tensor) and _close(qkv.double(), ref["params"]["attn.c_attn.weight"].chunk(w)[r]):
                shards = (f"rank {r}: attn.c_attn's rows cut as one contiguous block: q (and k) rows of several "
                          "heads, not q, k and v of its own heads"), "sp_heads"
            else:
                shards = f"rank {r}: {', '.join(bad)} differ from rank {r}'s shard (or are missing)", "shard"
            break
    outs = [dg.tensor(p, "out") for p in parts]
    out = None
    if not all(_close(o, ref["out"].chunk(w, 1)[r]) for r, o in enumerate(outs)):
        out = "the output differs from the dense layer's for this rank's tokens", "mlp"
        for scale in ((w, 1.0), (1.0, w), (w, w)):
            alt = _dense(params, scale)["out"]
            if all(_close(o, alt.chunk(w, 1)[r]) for r, o in enumerate(outs)):
                out = (f"the output is the dense layer's with a row-parallel bias {w}x: bias added before the "
                       f"reduce-scatter (counted {w} times)"), "bias_twice"
    xg = [dg.tensor(p, "xgrad") for p in parts]
    inp = None if all(_close(g, ref["xgrad"].chunk(w, 1)[r]) for r, g in enumerate(xg)) else (
        "the input gradient differs from the dense one for this rank's tokens", "mlp")
    return [shards, out, inp, _grads(parts, w, h, ref), _ops(parts, params)]


def _grads(parts: list, w: int, h: int, ref: dict) -> tuple[str, str] | None:
    got = [dg.field(p, "grads", dict) for p in parts]
    for r, g in enumerate(got):
        bad = [k for k, v in ref["grads"].items() if not isinstance(g.get(k), torch.Tensor)
               or not _close(dg.tensor(g, k), shard(k, v, r, w, h))]  # fmt: skip
        if not bad:
            continue
        ln = [k for k in bad if k.startswith("ln_")]
        if ln and all(isinstance(x.get(k), torch.Tensor) for x in got for k in ln) and all(
                _close(sum(dg.tensor(x, k) for x in got), ref["grads"][k]) for k in ln):
            return (f"{', '.join(ln)}: each rank's is its own tokens' part: LayerNorm gradients not all-reduced "
                    "over the ranks (the sum over ranks is the dense one)"), "sp_ln"
        return f"rank {r}: gradients of {', '.join(bad)} differ from the dense layer's shards", "mlp"
    return None


def _ops(parts: list, params: dict) -> tuple[str, str] | None:
    n = int(params["batch"]) * int(params["seq"]) * int(params["d_model"])
    for r, p in enumerate(parts):
        for phase in ("ops_fwd", "ops_bwd"):
            if _count(p[phase], "all_reduce"):
                return (f"rank {r}: an all-reduce in {phase[4:]}: an all-reduce where sequence parallelism "
                        "reduce-scatters"), "sp_scatter"
            ag, rs = _count(p[phase], "all_gather"), _count(p[phase], "reduce_scatter")
            if ag != [n, n] or rs != [n, n]:
                return (f"rank {r}, {phase[4:]}: all-gathers of {ag} and reduce-scatters of {rs} elements; the layer "
                        f"has 2 of each, of b x s x h = {n}"), "sp_gather" if ag != [n, n] else "sp_scatter"
    return None


def judge(record: dict[str, Any], params: dict[str, Any]) -> list[Case]:
    """(TRUSTED side.) Each check passes when it passes on every rank of every world size."""
    ref, runs, p = _dense(params), dg.field(record, "runs", list), probe(params)
    worlds = [int(w) for w in params["worlds"]]
    found: dict[str, tuple[int, tuple[str, str]]] = {}
    for i, w in enumerate(worlds):
        if i >= len(runs):
            return [case(n, False, "not run (an earlier world size hung or crashed)", "raised") for n in NAMES]
        run = dg.field(runs, i, dict)
        if dg.field(run, "world", int) != w:
            raise dg.BadRecord(f"run {i} is of world {run.get('world')}, expected {w}")
        if stop := dg.failure_case(run, f"the checks run on {w} ranks within {TIMEOUT_S:g} s", FAILURE_HINTS):
            return [stop]
        ranks = dg.ranks_of(run, w)
        if load := next((x["load"] for x in ranks if isinstance(x, dict) and "load" in x), None):
            return [case("the module imports", False, fault_text(load) or "", "raised")]
        results = [_g([dg.field(x, "probes", dict) for x in ranks], w, p),
                   _gbar([dg.field(x, "probes", dict) for x in ranks], w, p),
                   *_layer([dg.field(x, "block", dict) for x in ranks], w, params, ref)]
        for name, res in zip(NAMES, results, strict=True):
            if res is not None and name not in found:
                found[name] = (w, res)
    on = " and ".join(str(w) for w in worlds)
    out = []
    for name in NAMES:
        w, (detail, bug) = found.get(name, (0, ("", "")))
        out.append(case(f"{name} (on {on} ranks)", name not in found, f"on {w} ranks, {detail}" if detail else "",
                        bug))
    return out


register_build(BuildExercise(
    key=KEY, stub="sp_block.py",
    task="In build/sp_block.py write g (GatherSequence: all-gather along the sequence, reduce-scatter backward), "
         "g-bar (ReduceScatterSequence: the conjugate) and SequenceParallelBlock(block, rank, world): labkit's "
         "transformer layer with whole heads and a contiguous block of the MLP per rank, the LayerNorms and "
         "residuals on this rank's s/t tokens, and allreduce_replicated_grads(). Checked on 2 and 4 gloo ranks with "
         "shapes drawn per run: output and gradients equal the dense layer's within 1e-4, 2 all-gathers and 2 "
         "reduce-scatters each way.",
    hint=("Which parts of the layer need every token (attention, the linears' inputs), and which only this "
          "rank's (LayerNorm, residual adds)?",
          "ln_1 on s/t tokens -> g -> QKV and attention on this rank's heads -> c_proj -> g-bar -> + bias + "
          "residual; the same for the MLP; after backward all-reduce the LayerNorm and row-bias gradients."),
    worked="g.forward: all_gather_into_tensor of x.transpose(0, 1).contiguous(), transposed back; g.backward: "
           "reduce_scatter_tensor the same way; g-bar the other way round. The block keeps c_attn's rows "
           "j*h + r*h/t ... for j = q, k, v, c_proj's columns r*h/t..(r+1)*h/t, mlp.c_fc.weight.chunk(t, 0)[r], "
           "mlp.c_proj.weight.chunk(t, 1)[r], the LayerNorms and biases whole; forward: x + g-bar(attn(g(ln_1(x)))) "
           "+ b, then the MLP the same way (the biases after g-bar); allreduce_replicated_grads all-reduces the "
           "gradients of ln_1, ln_2 and both c_proj biases.",
    draw=draw, collect=collect, judge=judge,
))
