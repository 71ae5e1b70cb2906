"""ZeRO-DP on real process groups: DDP and stages 1-3, bytes held per rank and elements moved per step.

Rajbhandari et al., "ZeRO", SC 2020, shard data parallelism's model states over Nd ranks. Here
they are fp32 with AdamW: P = 4, G = 4, K = 8 bytes per parameter (two moments, no master copy);
per rank DDP holds (4+4+8)Psi, stage 1 4Psi + 4Psi + 8Psi/Nd, stage 2 4Psi + (4+8)Psi/Nd, stage 3
16Psi/Nd, and moves 2Psi elements per step (reduce-scatter + all-gather; an all-reduce of n counts
2n), 3Psi in stage 3. ``ddp`` is ``DistributedDataParallel``; ``zero1`` is ``ZeroRedundancyOptimizer``
over DDP, which keeps DDP's all-reduce and then *broadcasts* each updated parameter from its owner
(Psi more than the paper); ``zero3`` is FSDP2 ``fully_shard`` on each block and on the root, all
with ``reshard_after_forward=True`` so every group is gathered in forward and again in backward
(the paper's 3Psi; the root's default, False, would skip its backward gather). ``zero2`` is written
here: FSDP2 with ``reshard_after_forward=False`` still shards parameters at rest, which is stage 3
between steps. It keeps full parameters in one flat buffer, reduce-scatters a flat gradient, steps
AdamW on the local shard and all-gathers the parameters (the full gradient lives briefly after
backward; real ZeRO-2 reduces bucket by bucket during backward).

Collectives are counted by a ``TorchDispatchMode`` that sees every ``c10d::`` op, those the DDP
reducer issues from C++ included; ``crosscheck=True`` also counts the ``gloo:*`` events of a
torch.profiler run of the last step. They agree call for call, except that gloo has no
reduce-scatter: ``ProcessGroupGloo`` all-reduces a clone of the whole input and keeps its chunk, so
on gloo a reduce-scatter of n costs 2n (NCCL runs a real one). Dropout is 0 so that the ranks
together compute what one process computes on the full batch. The default model's tensors split
evenly over 2 and 4 ranks; ``predict`` gives torch's figures when they do not (FSDP2 pads dim 0 to
a multiple of Nd, ZeroRedundancyOptimizer assigns whole tensors greedily).
"""

from __future__ import annotations

import argparse
import math
from collections import defaultdict
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.tensor import DTensor
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from labkit import dist as ldist
from labkit.errors import require_choice, require_divides, require_positive
from labkit.measure import unique_bytes
from labkit.predict.estimate import model_state_bytes, zero_communication_elements
from labkit.rig.data import batches
from labkit.rig.model import GPTConfig, TinyGPT, config_from, count_parameters
from labkit.rig.step import Loop, training_step
from labkit.rig.train import TrainConfig, Trainer

STRATEGIES = {"ddp": 0, "zero1": 1, "zero2": 2, "zero3": 3}
MODEL = {"vocab_size": 64, "seq_len": 64, "n_layer": 2, "n_head": 4, "d_model": 32, "dropout": 0.0}
LR = 3e-3
CATEGORIES = ("parameters", "gradients", "optimizer")
BACKENDS = ("nccl", "gloo")
Comm = dict[str, dict[str, int]]  # collective kind -> {"calls", "elements", "bytes"}


def _kind(name: str) -> str:
    """c10d::_allgather_base_ -> all_gather, gloo:all_reduce -> all_reduce, ..."""
    name = name.split(":")[-1].strip("_").replace("_", "")
    kinds = ("allreduce", "allgather", "reducescatter", "broadcast")
    found = next((k for k in kinds if name.startswith(k)), name)
    return {"allreduce": "all_reduce", "allgather": "all_gather", "reducescatter": "reduce_scatter"}.get(found, found)


def model_config(model: dict | None = None) -> GPTConfig:
    """The tiny GPT used here (``MODEL`` updated by ``model``); dropout must be 0 so ranks agree."""
    return config_from(MODEL, model, no_dropout="loss curves must match across strategies")


def check(strategy: str, world_size: int, batch_size: int, steps: int) -> None:
    """Raise a LabkitError naming the field for an unknown strategy or an uneven batch split."""
    require_choice("strategy", strategy, STRATEGIES)
    for name, value in (("world_size", world_size), ("batch_size", batch_size), ("steps", steps)):
        require_positive(name, value)
    require_divides("world_size", world_size, "batch_size", batch_size)


class CollectiveCounter(TorchDispatchMode):
    """Counts every c10d collective dispatched while active: calls, elements and bytes by kind.

    Elements are the whole tensor a collective covers (all-reduced or broadcast tensor, all-gather
    output, reduce-scatter input). A ring moves (N-1)/N of that per rank; the paper rounds it to 1.
    """

    def __init__(self) -> None:
        super().__init__()
        self.counts: Comm = defaultdict(lambda: {"calls": 0, "elements": 0, "bytes": 0})

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        space, name = func._schema.name.split("::")
        if space in ("c10d", "_c10d_functional") and name not in ("wait_tensor", "barrier"):
            groups = [[t for t in tree_leaves(a) if isinstance(t, torch.Tensor)] for a in (*args, out)]
            biggest = max(groups, key=lambda ts: sum(t.numel() for t in ts))
            row = self.counts[_kind(name)]
            row["calls"] += 1
            row["elements"] += sum(t.numel() for t in biggest)
            row["bytes"] += sum(t.numel() * t.element_size() for t in biggest)
        return out


def profiled_collectives(prof: Any, world_size: int) -> Comm:
    """The same table from the ``gloo:*`` events of a torch.profiler run: what the backend ran."""
    out: Comm = defaultdict(lambda: {"calls": 0, "elements": 0})
    for ev in prof.events():
        if ev.name.startswith("gloo:"):
            kind, n = _kind(ev.name), sum(math.prod(s) for s in ev.input_shapes if s)
            out[kind]["calls"] += 1
            out[kind]["elements"] += n * (world_size if kind == "all_gather" else 1)  # its input is one shard
    return {k: dict(v) for k, v in sorted(out.items())}


def volume(comm: Comm, backend: str = "nccl") -> int:
    """Elements per rank as the paper counts them: an all-reduce (on gloo, a reduce-scatter too) counts twice."""
    require_choice("backend", backend, BACKENDS)
    double = {"all_reduce", "reduce_scatter"} if backend == "gloo" else {"all_reduce"}
    return sum(v["elements"] * (2 if k in double else 1) for k, v in comm.items())


class FlatZero2:
    """ZeRO stage 2 by hand: replicated flat parameters, sharded gradients and AdamW states."""

    def __init__(self, model: nn.Module, rank: int, world_size: int) -> None:
        self.params, self.world = list(model.parameters()), world_size
        self.n = -(-sum(p.numel() for p in self.params) // world_size)  # the flat buffer is padded to n * Nd
        self.flat, offset = torch.zeros(self.n * world_size), 0
        for p in self.params:  # the model's parameters become views of the flat buffer
            self.flat[offset : offset + p.numel()] = p.detach().reshape(-1)
            p.data = self.flat[offset : offset + p.numel()].view_as(p)
            offset += p.numel()
        self.shard = nn.Parameter(self.flat[rank * self.n : (rank + 1) * self.n])  # a view: no copy
        self.optimizer = torch.optim.AdamW([self.shard], lr=LR, weight_decay=0.0, foreach=False)

    def step(self) -> None:
        grads = [p.grad.reshape(-1) for p in self.params]
        flat_grad = torch.cat([*grads, torch.zeros(self.n * self.world - sum(g.numel() for g in grads))])
        for p in self.params:
            p.grad = None
        shard_grad = torch.empty(self.n)
        dist.reduce_scatter_single(shard_grad, flat_grad)  # SUM: gloo has no AVG
        self.shard.grad = shard_grad.div_(self.world)
        self.optimizer.step()
        dist.all_gather_single(self.flat, self.shard.detach().clone())

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.shard.grad = None


def _engine(strategy: str, net: nn.Module, rank: int, world_size: int) -> tuple[nn.Module, Any, list]:
    """(module to call, optimizer with step and zero_grad, tensors the optimizer adds to the model's)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.optim import ZeroRedundancyOptimizer
    from torch.nn.parallel import DistributedDataParallel as DDP

    adamw = {"lr": LR, "weight_decay": 0.0, "foreach": False}
    if strategy in ("ddp", "zero1"):  # the causal mask is a constant buffer: no broadcast every forward
        ddp = DDP(net, forward_sync_buffers=False, gradient_as_bucket_view=True)
        if strategy == "zero1":
            return ddp, ZeroRedundancyOptimizer(net.parameters(), optimizer_class=torch.optim.AdamW, **adamw), []
        return ddp, torch.optim.AdamW(net.parameters(), **adamw), []
    if strategy == "zero2":
        flat = FlatZero2(net, rank, world_size)
        return net, flat, [flat.shard]
    mesh = init_device_mesh("cpu", (world_size,))
    for block in net.h:
        fully_shard(block, mesh=mesh, reshard_after_forward=True)
    fully_shard(net, mesh=mesh, reshard_after_forward=True)
    return net, torch.optim.AdamW(net.parameters(), **adamw), []


def held_bytes(net: nn.Module, optimizer: Any, extra: list) -> dict[str, int]:
    """Bytes this rank keeps between steps, by distinct storage; a DTensor counts its local shard."""
    local = lambda t: t.to_local() if isinstance(t, DTensor) else t  # noqa: E731
    params = [*net.parameters(), *extra]
    inner = getattr(optimizer, "optim", getattr(optimizer, "optimizer", optimizer))
    states = [local(t) for s in inner.state.values() for t in s.values() if torch.is_tensor(t) and t.dim()]
    return {"parameters": unique_bytes(local(p) for p in params),
            "gradients": unique_bytes(local(p.grad) for p in params), "optimizer": unique_bytes(states)}


@dataclass
class RankResult:
    """What one rank measured: global-batch losses, bytes held after the last step, collectives per step."""

    strategy: str
    rank: int
    world_size: int
    model: dict[str, Any]  # the GPTConfig fields
    params: int
    losses: list[float]
    held: dict[str, int]
    comm: list[Comm]  # one table per step
    profiled: Comm = field(default_factory=dict)  # the last step, from gloo's profiler events

    @property
    def steady(self) -> Comm:
        """The last step's collectives (at step 1, DDP also broadcasts its rebuilt bucket layout)."""
        return self.comm[-1]


def train_rank(rank: int, world_size: int, strategy: str = "zero3", steps: int = 5, model: dict | None = None,
               batch_size: int = 8, seed: int = 0, crosscheck: bool = False) -> dict:
    """(Runs in a rank.) Train ``steps`` steps with ``strategy``; rank ``r`` takes slice ``r`` of batch ``i``."""
    check(strategy, world_size, batch_size, steps)
    cfg = model_config(model)
    torch.manual_seed(seed)
    net = TinyGPT(cfg)
    psi = count_parameters(net)
    module, optimizer, extra = _engine(strategy, net, rank, world_size)
    data, local = batches(batch_size, cfg.seq_len, seed), batch_size // world_size
    loop = Loop(module, optimizer, lambda i: tuple(t[rank * local : (rank + 1) * local] for t in data(i)))
    losses, comm, profiled = [], [], {}
    for i in range(steps):
        prof = torch.profiler.profile(record_shapes=True) if crosscheck and i == steps - 1 else None
        with CollectiveCounter() as counter, prof or nullcontext():
            loss = training_step(loop, i, keep_grads=True)  # the last gradients stay: held_bytes counts them
        comm.append({k: dict(v) for k, v in sorted(counter.counts.items())})
        profiled = profiled_collectives(prof, world_size) if prof else profiled
        losses.append(torch.tensor(loss))
    mean = torch.stack(losses)
    dist.all_reduce(mean)  # after the counted steps: only to report the global-batch loss
    held = held_bytes(net, optimizer, extra)
    return asdict(RankResult(strategy, rank, world_size, asdict(cfg), psi, (mean / world_size).tolist(), held, comm,
                             profiled))


def train_jobs(rank: int, world_size: int, jobs: tuple[dict, ...]) -> list[dict]:
    """(Runs in a rank.) ``train_rank(**job)`` for each job in one process group: one start-up, not one per job."""
    return [train_rank(rank, world_size, **job) for job in jobs]


def run_jobs(jobs: list[dict], world_size: int = 2, timeout: float = 180.0) -> list[list[RankResult]]:
    """Run each job (keyword arguments of ``train_rank``) on ``world_size`` local ranks; per job, per rank."""
    for job in jobs:
        job = {"strategy": "zero3", "steps": 5, "batch_size": 8, **job}
        check(job["strategy"], world_size, job["batch_size"], job["steps"])
        model_config(job.get("model"))
    out = ldist.run(train_jobs, world_size, timeout=timeout, threads=1, jobs=tuple(jobs))
    return [[RankResult(**rank[j]) for rank in out] for j in range(len(jobs))]


def run_strategies(strategies: tuple[str, ...] = tuple(STRATEGIES), world_size: int = 2, steps: int = 5,
                   timeout: float = 180.0, **kwargs: Any) -> dict[str, list[RankResult]]:
    """Train each strategy on the same ranks (``kwargs``: model, batch_size, seed, crosscheck); per-rank results."""
    jobs = [{"strategy": s, "steps": steps, **kwargs} for s in strategies]
    return dict(zip(strategies, run_jobs(jobs, world_size, timeout), strict=True))


def run_strategy(strategy: str, world_size: int = 2, steps: int = 5, **kwargs: Any) -> list[RankResult]:
    """Train one strategy on ``world_size`` local ranks (``kwargs`` as ``run_strategies``)."""
    return run_strategies((strategy,), world_size, steps, **kwargs)[strategy]


def single_process_losses(steps: int = 5, model: dict | None = None, batch_size: int = 8, seed: int = 0,
                          threads: int = 1) -> list[float]:
    """The reference curve: one process, the full batch ``i`` at step ``i``, same seed and AdamW."""
    before = torch.get_num_threads()
    try:
        cfg = TrainConfig(model=model_config(model), batch_size=batch_size, lr=LR, seed=seed, threads=threads)
        return Trainer(cfg).run(steps)
    finally:
        torch.set_num_threads(before)


@dataclass(frozen=True)
class Prediction:
    """Bytes per rank and elements per step: the paper's figures and those of torch's engines."""

    strategy: str
    world_size: int
    params: int
    bytes_paper: dict[str, float]
    bytes_torch: dict[str, list[int]]  # per rank: a greedy partition or padding can make ranks differ
    comm_paper: int
    comm_torch: dict[str, int]  # elements by collective kind

    def volume_torch(self, backend: str = "nccl") -> int:
        return volume({k: {"elements": v} for k, v in self.comm_torch.items()}, backend)


def _elements_held(shapes: list[tuple[int, ...]], stage: int, n: int) -> dict[str, list[int]]:
    """Elements each rank keeps per category, laid out as torch's engines lay them out."""
    psi = sum(math.prod(s) for s in shapes)
    if stage == 3:  # FSDP2 pads dim 0 to a multiple of n: shards keep the padding, AdamW's states do not
        chunks = [(-(-s[0] // n), s[0], math.prod(s[1:])) for s in shapes]
        padded = sum(c * row for c, _, row in chunks)
        real = [sum(max(0, min(c, rows - r * c)) * row for c, rows, row in chunks) for r in range(n)]
        return {"parameters": [padded] * n, "gradients": [padded] * n, "optimizer": real}
    if stage == 2:
        flat = -(-psi // n)  # the flat buffer is padded to a multiple of n
        return {"parameters": [flat * n] * n, "gradients": [flat] * n, "optimizer": [flat] * n}
    owned = [0] * n  # ZeroRedundancyOptimizer: largest tensor first, to the rank that owns least so far
    for size in sorted((math.prod(s) for s in shapes), reverse=True):
        owned[owned.index(min(owned))] += size
    return {"parameters": [psi] * n, "gradients": [psi] * n, "optimizer": owned if stage == 1 else [psi] * n}


def predict(strategy: str, world_size: int, model: dict | None = None) -> Prediction:
    """ZeRO's model (labkit.predict.estimate, fp32 AdamW) beside torch's partition, padding and extra broadcast."""
    require_choice("strategy", strategy, STRATEGIES)
    require_positive("world_size", world_size)
    stage, n = STRATEGIES[strategy], world_size
    with torch.device("meta"):
        shapes = [tuple(p.shape) for p in TinyGPT(model_config(model)).parameters()]
    psi = sum(math.prod(s) for s in shapes)
    held = _elements_held(shapes, stage, n)
    full = n * held["gradients"][0]  # what one stage-2/3 reduce-scatter or all-gather covers, padding included
    comm = [{"all_reduce": psi}, {"all_reduce": psi, "broadcast": psi},
            {"reduce_scatter": full, "all_gather": full}, {"reduce_scatter": full, "all_gather": 2 * full}][stage]
    per = {"parameters": 4, "gradients": 4, "optimizer": 8}
    return Prediction(strategy, n, psi, model_state_bytes(psi, "fp32", stage, n),
                      {k: [per[k] * e for e in v] for k, v in held.items()},
                      zero_communication_elements(psi, stage), comm)


@dataclass(frozen=True)
class Row:
    """One measured figure beside torch's predicted one and the paper's (None where it has none)."""

    strategy: str
    rank: int
    category: str
    measured: float
    predicted: float
    paper: float | None


def compare(results: list[RankResult]) -> list[Row]:
    """Bytes per category and steady-state elements per collective, every rank, measured beside predicted."""
    rows = []
    for r in results:
        pred = predict(r.strategy, r.world_size, r.model)
        for c in CATEGORIES:
            rows.append(Row(r.strategy, r.rank, c, r.held[c], pred.bytes_torch[c][r.rank], pred.bytes_paper[c]))
        for kind in sorted({*r.steady, *pred.comm_torch}):
            got = r.steady.get(kind, {}).get("elements", 0)
            rows.append(Row(r.strategy, r.rank, f"comm {kind}", got, pred.comm_torch.get(kind, 0), None))
        rows.append(Row(r.strategy, r.rank, "comm volume", volume(r.steady), pred.volume_torch(), pred.comm_paper))
        if r.profiled:
            rows.append(Row(r.strategy, r.rank, "comm volume on gloo", volume(r.profiled), pred.volume_torch("gloo"),
                            pred.comm_paper))
    return rows


if __name__ == "__main__":  # torchrun --nproc-per-node 2 -m labkit.inter_layer.zero --strategy zero3 --steps 2
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--strategy", default="zero3", choices=list(STRATEGIES))
    parser.add_argument("--steps", type=int, default=5)
    a = parser.parse_args()
    ldist.main_under_torchrun(train_rank, strategy=a.strategy, steps=a.steps)
