"""The untrusted side of 03.build.sp_block: the learner's sequence-parallel layer run in real gloo ranks.

Each rank loads the module, runs g (``GatherSequence``) and g-bar (``ReduceScatterSequence``) alone on probe tensors
(forward and backward), then its ``SequenceParallelBlock`` on its s/t tokens: the output, the input's gradient, the
parameters it holds and their gradients after ``allreduce_replicated_grads``, and every collective with its size,
per phase (:class:`labkit.practice.build.rank_record.CollectiveLog`). The judge in
:mod:`labkit.practice.build.sp_block` decides.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from labkit.practice.build import records
from labkit.practice.build.rank_record import CollectiveLog, all_agree, attempt, sync
from labkit.practice.build.records import load_module
from labkit.rig.model import Block, GPTConfig

TIMEOUT_S = 8.0  # a world's checks take about a second once started; a hang is stopped here


def config(params: dict[str, Any]) -> GPTConfig:
    return GPTConfig(vocab_size=16, seq_len=int(params["seq"]), n_layer=1, n_head=int(params["n_head"]),
                     d_model=int(params["d_model"]), dropout=0.0, attention="explicit")


def layer(params: dict[str, Any]) -> tuple[Block, torch.Tensor, torch.Tensor]:
    """The dense layer, its input (b, s, h) and the loss weights: the same in every rank and in the judge."""
    cfg = config(params)
    torch.manual_seed(int(params["seed"]))
    block = Block(cfg)
    with torch.no_grad():
        for p in (block.ln_1.weight, block.ln_1.bias, block.ln_2.weight, block.ln_2.bias):
            p.add_(0.1 * torch.randn_like(p))  # LayerNorm parameters that are not 1 and 0 show in the gradients
    shape = (int(params["batch"]), cfg.seq_len, cfg.d_model)
    g = torch.Generator().manual_seed(int(params["seed"]) + 1)
    return block, torch.randn(shape, generator=g), torch.randn(shape, generator=g)


def probe(params: dict[str, Any]) -> dict[str, torch.Tensor]:
    """Distinct values everywhere: (b, s, h) counting tensors for g and g-bar."""
    b, s, h = int(params["batch"]), int(params["seq"]), int(params["d_model"])
    base = torch.arange(b * s * h, dtype=torch.float32).view(b, s, h)
    return {"base": base, "base2": base.flip(-1) * 0.5}


def _chunk(t: torch.Tensor, rank: int, world: int) -> torch.Tensor:
    return t.chunk(world, dim=1)[rank]


def _probes(m: Any, params: dict[str, Any], rank: int, world: int) -> dict[str, Any]:
    p = probe(params)
    x = _chunk(p["base"], rank, world).clone().requires_grad_()
    with CollectiveLog() as gf:
        y = m.GatherSequence.apply(x)
    out: dict[str, Any] = {"gather": y.detach(), "ops_gather": gf.ops}
    if not all_agree(tuple(y.shape) == tuple(p["base"].shape)):  # a wrong shape: its backward cannot run
        return out
    y.backward(p["base2"] * (rank + 1))
    big = (p["base"] * (rank + 1)).requires_grad_()
    with CollectiveLog() as rf:
        z = m.ReduceScatterSequence.apply(big)
    z.backward(_chunk(p["base2"], rank, world).contiguous())
    return {**out, "gather_grad": x.grad, "rs": z.detach(), "rs_grad": big.grad, "ops_rs": rf.ops}


def _block(path: str, m: Any, params: dict[str, Any], rank: int, world: int) -> dict[str, Any]:
    block, x, w = layer(params)
    built = attempt(path, lambda: {"sp": m.SequenceParallelBlock(block, rank, world)})
    if not all_agree("sp" in built):  # a rank that failed to build would leave the others in a collective alone
        return built if "sp" not in built else {"failure": {"kind": "raised", "message": "another rank failed to "
                                                            "build its block", "learner_frames": ""}}
    sp = built["sp"]

    def step() -> dict[str, Any]:
        xi = _chunk(x, rank, world).clone().requires_grad_()
        with CollectiveLog() as fwd:
            out = sp(xi)
        with CollectiveLog() as bwd:
            (out * _chunk(w, rank, world)).sum().backward()
        with CollectiveLog() as sync:
            sp.allreduce_replicated_grads()
        named = dict(sp.named_parameters())
        return {"out": out.detach(), "xgrad": xi.grad, "ops_fwd": fwd.ops, "ops_bwd": bwd.ops, "ops_sync": sync.ops,
                "params": {k: v.detach().clone() for k, v in named.items()},
                "grads": {k: v.grad.detach().clone() for k, v in named.items() if v.grad is not None}}

    return attempt(path, step)


def _one(path: str, rank: int, world: int, params: dict[str, Any]) -> dict[str, Any]:
    loaded = attempt(path, lambda: {"m": load_module(path)})
    if "m" not in loaded:
        return {"load": loaded}
    rec = {"probes": attempt(path, lambda: _probes(loaded["m"], params, rank, world))}
    sync()
    rec["block"] = _block(path, loaded["m"], params, rank, world)
    sync()
    return rec


def sp_rank(rank: int, world: int, log: records.OpLog, path: str, params: dict[str, Any],
            paths: list[str]) -> list[dict[str, Any]]:
    """(Runs in a rank.) One record per module in ``paths``, each torch.distributed call logged."""
    with records.recording(log):
        return [_one(p, rank, world, params) for p in paths]


def collect_many(paths: list[Path], params: dict[str, Any]) -> list[dict[str, Any]]:
    """One record per module, one launch per world size for all of them (:func:`records.grouped`)."""
    return records.grouped(sp_rank, paths, params, TIMEOUT_S)


def collect(path: Path, params: dict[str, Any]) -> dict[str, Any]:
    """The raw record of the learner's module at ``path``: every world size's ranks, or a launch's fault."""
    return collect_many([path], params)[0]
