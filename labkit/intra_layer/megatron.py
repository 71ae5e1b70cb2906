"""Megatron 1D tensor parallelism of the tiny GPT on DTensor: bytes and collectives per rank, beside the formulas.

Shoeybi et al., "Megatron-LM", 2019, split each layer over t ranks: the QKV projection column-wise
(whole heads per rank), the attention output projection row-wise, the MLP's first linear column-wise
and its second row-wise; one all-reduce of b*s*h after each row-parallel linear (operator g, forward)
and one before each column-parallel linear (operator f, backward): 4 per layer per micro-batch.
Korthikanti et al., "Reducing Activation Recomputation in Large Transformer Models", 2022, add
sequence parallelism (SP): LayerNorms and dropouts run on s/t of the sequence, each all-reduce becomes
an all-gather plus a reduce-scatter of the same b*s*h, and a column-parallel linear keeps only its
sequence shard for backward, paying one more all-gather there (their section 4.2.2).

torch does the splitting (``parallelize_module`` with ``ColwiseParallel``, ``RowwiseParallel``,
``SequenceParallel`` on a 1-D cpu mesh). Written here, and why:

* ``c_attn`` is one fused Linear with [q; k; v] row blocks: a plain column split would give rank 0
  all of q and half of k. Its rows are permuted to [q_0; k_0; v_0; q_1; ...] (``qkv_rows``) before
  the split, so each rank holds whole heads of q, k and v, and each block's attention becomes a
  ``HeadParallelAttention``, which reads its head count off the local width. labkit.rig.model is not
  changed; gradients are permuted back before they are compared with its single-process TinyGPT.
* The tied embedding is split by vocabulary, as in Megatron: ``wte`` row-wise and ``lm_head``
  column-wise are both ``Shard(0)``, so they stay one DTensor; the loss is torch's ``loss_parallel``
  (Megatron's vocabulary-parallel cross-entropy). ``wpe`` and ``ln_f`` are replicated.
* Korthikanti's saved shard: torch's column-parallel linear would keep its all-gathered input. A
  ``saved_tensors_hooks`` pack hook (``SavedBytes``) keeps this rank's 1/t and all-gathers it back in backward.

Dropout must be 0 for outputs to equal one process: with dropout > 0 each rank draws its own masks
(Megatron coordinates them with an RNG tracker: one seed for replicated regions, one per rank for
split ones). Runs with dropout > 0 are used for bytes only, to see the masks in the formula.
"""

from __future__ import annotations

import argparse
import warnings
from collections import defaultdict
from contextlib import ExitStack
from dataclasses import asdict, dataclass
from functools import partial
from typing import Any

import torch
import torch.nn as nn
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.tensor import DTensor, Replicate, Shard
from torch.distributed.tensor.debug import CommDebugMode
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    PrepareModuleOutput,
    RowwiseParallel,
    SequenceParallel,
    loss_parallel,
    parallelize_module,
)
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from labkit import dist as ldist
from labkit.errors import require_choice, require_divides, require_positive
from labkit.measure import ModuleHooks, SavedTensor
from labkit.predict.estimate import activation_bytes_per_layer
from labkit.rig.data import batches
from labkit.rig.model import GPTConfig, SelfAttention, TinyGPT, config_from
from labkit.rig.step import Loop, StepHooks, forward_backward, optimizer_step, training_step
from labkit.shapes import ModelShape

MODEL = {"vocab_size": 64, "seq_len": 64, "n_layer": 2, "n_head": 4, "d_model": 32, "dropout": 0.0}
LR = 0.1
SAVED_SHARDS = ("attn.c_attn", "mlp.c_fc", "lm_head")  # under SP these keep 1/t of their gathered input
KINDS = {"allreduce": "all_reduce", "allgather": "all_gather", "reducescatter": "reduce_scatter",
         "broadcast": "broadcast", "alltoall": "all_to_all"}
Comm = dict[str, dict[str, int]]  # kind -> {"calls", "elements", "bytes"}


def model_config(model: dict | None = None) -> GPTConfig:
    """The tiny GPT used here: ``MODEL`` updated by ``model`` (explicit attention, 1-byte masks)."""
    return config_from(MODEL, model)


def check(world_size: int, cfg: GPTConfig, sp: bool, batch_size: int, tp: int = 0) -> int:
    """The tensor-parallel degree t (0 means world_size), or a LabkitError naming what t must fit."""
    require_positive("world_size", world_size)
    require_positive("batch_size", batch_size)
    t = tp or world_size
    require_choice("tp", t, (world_size,))  # one 1-D mesh over every rank
    require_divides("tp", t, "n_head", cfg.n_head)
    require_divides("tp", t, "ffn", cfg.ffn_size)
    require_divides("tp", t, "vocab_size", cfg.vocab_size)
    if sp:
        require_divides("tp", t, "seq_len", cfg.seq_len)
    return t


def qkv_rows(d_model: int, tp: int) -> torch.Tensor:
    """Row order of ``c_attn`` that puts q, k and v of rank r's heads in the r-th column shard."""
    w = d_model // tp
    return torch.cat([torch.arange(w) + j * d_model + r * w for r in range(tp) for j in range(3)])


class HeadParallelAttention(SelfAttention):
    """``SelfAttention`` on the heads ``c_attn`` returns (a/t of them), with q, k, v side by side per rank."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        qkv = self.c_attn(x)  # (b, s, 3h/t), local
        b, s, w = qkv.shape
        d = self.c_proj.out_features // self.n_head
        q, k, v = (t.view(b, s, -1, d).transpose(1, 2) for t in qkv.split(w // 3, dim=2))
        y = self.core(q, k, v).transpose(1, 2).contiguous().view(b, s, w // 3)  # (b, s, h/t)
        return self.resid_drop(self.c_proj(y))


def build(cfg: GPTConfig, mesh: DeviceMesh, sp: bool, seed: int) -> TinyGPT:
    """The seeded TinyGPT, QKV rows regrouped by rank, split over ``mesh`` (the Megatron layout)."""
    torch.manual_seed(seed)
    net, order = TinyGPT(cfg), qkv_rows(cfg.d_model, mesh.size())
    seq, rep = Shard(1), Replicate()
    act = seq if sp else rep  # the layout of the residual stream
    layer = {"attn.c_attn": ColwiseParallel(input_layouts=act), "attn.c_proj": RowwiseParallel(output_layouts=act),
             "mlp.c_fc": ColwiseParallel(input_layouts=act), "mlp.c_proj": RowwiseParallel(output_layouts=act)}
    top = {"wte": RowwiseParallel(input_layouts=rep, output_layouts=act),
           "lm_head": ColwiseParallel(input_layouts=act, output_layouts=Shard(-1), use_local_output=False)}
    if sp:
        layer |= {"ln_1": SequenceParallel(), "ln_2": SequenceParallel()}
        top |= {"ln_f": SequenceParallel(),  # wpe's (s, h) output is cut to this rank's positions: (s/t, h)
                "wpe": PrepareModuleOutput(output_layouts=rep, desired_output_layouts=Shard(0))}
    for block in net.h:
        block.attn.__class__ = HeadParallelAttention  # same parameters and names, head-aware forward
        with torch.no_grad():
            for p in (block.attn.c_attn.weight, block.attn.c_attn.bias):
                p.copy_(p[order])
        parallelize_module(block, mesh, layer)
    parallelize_module(net, mesh, top)
    net.lm_head.weight = net.wte.weight  # the two Shard(0) copies become one again
    return net


def _local(t: torch.Tensor) -> torch.Tensor:
    return t.to_local() if isinstance(t, DTensor) else t


def _key(t: torch.Tensor) -> int:
    return _local(t).untyped_storage().data_ptr()


class SavedBytes(ModuleHooks):
    """What autograd keeps, by module (labkit.measure's ``SavedTensorRecorder`` for DTensors), and SP's shards.

    Each storage counts once; a DTensor counts its local tensor; parameters, buffers and the batch
    are left out. With ``shard_modules``, a replicated DTensor saved inside one of them (the
    all-gathered input of a column-parallel linear) is kept as this rank's 1/t slice and all-gathered
    back when backward unpacks it: Korthikanti et al.'s stored shard, paid for with one all-gather.
    """

    def __init__(self, model: nn.Module, exclude: tuple[torch.Tensor, ...], mesh: DeviceMesh,
                 shard_modules: tuple[str, ...] = ()) -> None:
        super().__init__(model)
        self.skip = {_key(t) for t in (*model.parameters(), *model.buffers(), *exclude)}
        self.mesh, self.shard_modules = mesh, shard_modules
        self.records: dict[int, SavedTensor] = {}

    def _record(self, t: torch.Tensor) -> None:
        key = _key(t)
        if key not in self.skip and key not in self.records and t.numel():
            self.records[key] = SavedTensor(self.stack[-1] if self.stack else "", tuple(t.shape),
                                            str(t.dtype).replace("torch.", ""), t.untyped_storage().nbytes())

    def _pack(self, t: torch.Tensor) -> Any:
        with torch.no_grad():
            local, module = _local(t), (self.stack[-1] if self.stack else "")
            if (self.shard_modules and module.endswith(self.shard_modules) and isinstance(t, DTensor)
                    and all(p.is_replicate() for p in t.placements) and _key(local) not in self.skip
                    and local.is_contiguous()):
                piece = local.chunk(self.mesh.size())[self.mesh.get_local_rank()].clone()
                self._record(piece)
                return piece, t.shape
            self._record(local)
            return t

    def _unpack(self, packed: Any) -> torch.Tensor:
        if isinstance(packed, tuple):
            piece, shape = packed
            full = DTensor.from_local(piece, self.mesh, [Shard(0)], run_check=False).full_tensor()
            return DTensor.from_local(full.view(shape), self.mesh, [Replicate()], run_check=False)
        return packed

    def by_layer(self, n_layer: int) -> list[dict[str, int]]:
        """Saved bytes of each layer, by the module (role) that saved them."""
        out: list[dict[str, int]] = [defaultdict(int) for _ in range(n_layer)]
        for t in self.records.values():
            if t.layer is not None:
                out[t.layer][t.role] += t.nbytes
        return [dict(d) for d in out]


def _kind(name: str) -> str:
    """all_gather_into_tensor -> all_gather, allreduce_ -> all_reduce, ..."""
    flat = name.replace("_", "")
    return next((kind for prefix, kind in KINDS.items() if flat.startswith(prefix)), name)


class CollectiveCounter(TorchDispatchMode):
    """Counts the collectives DTensor issues: calls, elements (the whole tensor covered) and bytes by kind.

    Like ``CommDebugMode`` it lets DTensor run first (``NotImplemented``) and sees the functional
    collectives it lowers to; it also counts their sizes, which CommDebugMode does not.
    """

    def __init__(self) -> None:
        super().__init__()
        self.counts: Comm = defaultdict(lambda: {"calls": 0, "elements": 0, "bytes": 0})

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if any(issubclass(t, DTensor) for t in types):
            return NotImplemented
        out = func(*args, **(kwargs or {}))
        space, name = func._schema.name.split("::")
        if space in ("c10d", "_c10d_functional") and _kind(name) in KINDS.values():
            groups = [[t for t in tree_leaves(a) if isinstance(t, torch.Tensor)] for a in (*args, out)]
            biggest = max(groups, key=lambda ts: sum(t.numel() for t in ts))  # gather output, scatter input
            row = self.counts[_kind(name)]
            row["calls"] += 1
            row["elements"] += sum(t.numel() for t in biggest)
            row["bytes"] += sum(t.numel() * t.element_size() for t in biggest)
        return out

    def table(self) -> Comm:
        return {k: dict(v) for k, v in sorted(self.counts.items())}


def _full(t: torch.Tensor) -> torch.Tensor:
    return (t.full_tensor() if isinstance(t, DTensor) else t).detach().clone()


@dataclass
class RankResult:
    """One rank: bytes and collectives of the first step, losses of every step, outputs of the last."""

    rank: int
    tp: int
    sp: bool
    model: dict  # the GPTConfig fields
    batch_size: int
    param_bytes: int  # local shards, each storage once
    activation_bytes: list[int]  # saved for backward, per layer
    activation_roles: dict[str, int]  # layer 0, by the module that saved
    comm: Comm  # one forward+backward, counted by CollectiveCounter
    comm_debug: dict[str, int]  # calls per kind of the same, counted by torch's CommDebugMode
    comm_step: Comm  # the optimizer step
    losses: list[float]
    logits: torch.Tensor  # the last step's, gathered
    grads: dict[str, torch.Tensor]  # the last step's, gathered, c_attn rows back in the fused [q; k; v] order


def train_tp(rank: int, world_size: int, sp: bool = False, model: dict | None = None, batch_size: int = 2,
             seed: int = 0, steps: int = 1, tp: int = 0) -> dict:
    """(Runs in a rank.) ``steps`` SGD steps of the tiny GPT split over all ranks, batch ``i`` at step ``i``."""
    cfg = model_config(model)
    t = check(world_size, cfg, sp, batch_size, tp)
    require_positive("steps", steps)
    mesh = init_device_mesh("cpu", (t,))
    net = build(cfg, mesh, sp, seed)
    opt = torch.optim.SGD(net.parameters(), lr=LR)
    losses, seen = [], {}
    loop = Loop(net, opt, batches(batch_size, cfg.seq_len, seed), loss=partial(_logits_and_loss, seen))
    param_bytes = sum({_key(p): _local(p).untyped_storage().nbytes() for p in net.parameters()}.values())

    def counted(_batch) -> ExitStack:  # forward and backward: collectives counted two ways, the loss parallel
        stack = ExitStack()
        seen["debug"], seen["counter"] = stack.enter_context(CommDebugMode()), stack.enter_context(CollectiveCounter())
        stack.enter_context(loss_parallel())
        return stack

    def saving(batch) -> SavedBytes:
        seen["saved"] = SavedBytes(net, tuple(batch), mesh, SAVED_SHARDS if sp else ())
        return seen["saved"]

    def stepping() -> CollectiveCounter:
        seen["stepped"] = CollectiveCounter()
        return seen["stepped"]

    hooks = StepHooks(around=counted, forward=saving, optimizer=stepping)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Full backward hook is firing")  # CommDebugMode's module tracker
        for i in range(steps):
            opt.zero_grad(set_to_none=True)
            loss = forward_backward(loop, i, hooks)
            optimizer_step(opt, hooks, zero_grad=False)  # SGD leaves the last gradients in place
            saved, counter, debug, stepped = seen["saved"], seen["counter"], seen["debug"], seen["stepped"]
            if i == 0:
                layers = saved.by_layer(cfg.n_layer)
                first = ([sum(d.values()) for d in layers], layers[0], counter.table(),
                         {_kind(str(k).split(".")[-1]): v for k, v in debug.get_comm_counts().items()}, stepped.table())
            losses.append(float(_full(loss)))
    grads = {n: _full(p.grad) for n, p in net.named_parameters()}  # SGD leaves the last gradients in place
    back = torch.argsort(qkv_rows(cfg.d_model, t))
    grads |= {n: g[back] for n, g in grads.items() if ".c_attn." in n}
    return asdict(RankResult(rank, t, sp, asdict(cfg), batch_size, param_bytes, *first, losses, _full(seen["logits"]),
                             grads))


def _logits_and_loss(seen: dict, model: nn.Module, batch) -> torch.Tensor:
    """The tiny GPT's loss, its logits kept in ``seen`` (the last step's are compared across ranks)."""
    seen["logits"], loss = model(*batch)
    return loss


def train_jobs(rank: int, world_size: int, jobs: tuple[dict, ...]) -> list[dict]:
    """(Runs in a rank.) ``train_tp(**job)`` for each job in one process group: one start-up, not one per job."""
    return [train_tp(rank, world_size, **job) for job in jobs]


def run_jobs(jobs: list[dict], world_size: int = 2, timeout: float = 180.0) -> list[list[RankResult]]:
    """Run each job (keyword arguments of ``train_tp``) on ``world_size`` local ranks; per job, per rank."""
    for job in jobs:  # bad input fails here, before any process starts
        check(world_size, model_config(job.get("model")), job.get("sp", False), job.get("batch_size", 2),
              job.get("tp", 0))
    out = ldist.run(train_jobs, world_size, timeout=timeout, threads=1, jobs=tuple(jobs))
    return [[RankResult(**rank[j]) for rank in out] for j in range(len(jobs))]


def run_tp(world_size: int = 2, sp: bool = False, timeout: float = 120.0, **kwargs: Any) -> list[RankResult]:
    """Tensor (with ``sp``, and sequence) parallel training on ``world_size`` local ranks; one result per rank."""
    return run_jobs([{"sp": sp, **kwargs}], world_size, timeout)[0]


def single_process(model: dict | None = None, batch_size: int = 2, seed: int = 0, steps: int = 1) -> dict[str, Any]:
    """The reference: labkit.rig.model's own TinyGPT (fused QKV, tied head), same seed, batches and SGD."""
    cfg = model_config(model)
    torch.manual_seed(seed)
    net = TinyGPT(cfg)
    seen: dict = {}
    loop = Loop(net, torch.optim.SGD(net.parameters(), lr=LR), batches(batch_size, cfg.seq_len, seed),
                loss=partial(_logits_and_loss, seen))
    losses = [training_step(loop, i, keep_grads=True) for i in range(steps)]
    grads = {n: p.grad for n, p in net.named_parameters()}
    return {"losses": losses, "logits": seen["logits"].detach(), "grads": grads}


@dataclass(frozen=True)
class Collective:
    """Collectives of one kind at one place of a step: ``calls`` of them, ``elements`` in all."""

    part: str  # "layers" (the papers' count), "saved shards", "outside layers", "optimizer step"
    where: str
    kind: str
    calls: int
    elements: int


def collectives(tp: int, sp: bool = False, model: dict | None = None, batch_size: int = 2) -> list[Collective]:
    """Every collective of a training step, itemised: the papers' per-layer ones and what torch adds.

    Without SP each layer all-reduces b*s*h after its two row-parallel linears (g) and before its two
    column-parallel ones in backward (f) (Shoeybi et al. 2019). With SP each all-reduce is an all-gather
    and a reduce-scatter of the same size, plus a re-gather of each saved shard (Korthikanti et al.
    2022); the LayerNorm gradients are left Partial and all-reduced when the optimizer reads them.
    """
    cfg = model_config(model)
    check(tp, cfg, sp, batch_size)
    n, bs, h = 2 * cfg.n_layer, batch_size * cfg.seq_len, cfg.d_model
    bsh, c = bs * h, Collective
    if not sp:
        rows = [c("layers", "g: output of each row-parallel linear (forward)", "all_reduce", n, n * bsh),
                c("layers", "f: input gradient of each column-parallel linear (backward)", "all_reduce", n, n * bsh),
                c("outside layers", "wte: vocab-parallel embedding output (forward)", "all_reduce", 1, bsh),
                c("outside layers", "lm_head: input gradient (backward)", "all_reduce", 1, bsh)]
    else:
        norms = 4 * cfg.n_layer + 2  # weight and bias of ln_1, ln_2 per layer, and of ln_f
        rows = [c("layers", "input of each column-parallel linear (forward)", "all_gather", n, n * bsh),
                c("layers", "output of each row-parallel linear (forward)", "reduce_scatter", n, n * bsh),
                c("layers", "input gradient of each column-parallel linear (backward)", "reduce_scatter", n, n * bsh),
                c("layers", "output gradient of each row-parallel linear (backward)", "all_gather", n, n * bsh),
                c("saved shards", "input of each column-parallel linear, again (backward)", "all_gather", n, n * bsh),
                c("outside layers", "wte: output (forward)", "reduce_scatter", 1, bsh),
                c("outside layers", "wte: output gradient (backward)", "all_gather", 1, bsh),
                c("outside layers", "wpe: output gradient, Shard(0) to Replicate (backward)", "all_gather", 1,
                  cfg.seq_len * h),
                c("outside layers", "lm_head: input (forward), its saved shard (backward)", "all_gather", 2, 2 * bsh),
                c("outside layers", "lm_head: input gradient (backward)", "reduce_scatter", 1, bsh),
                c("optimizer step", "LayerNorm weight and bias gradients (Partial)", "all_reduce", norms, norms * h)]
    return rows + [c("outside layers", "loss_parallel: row max, sum of exp, target logit", "all_reduce", 3, 3 * bs)]


def comm_table(rows: list[Collective], parts: tuple[str, ...]) -> dict[str, dict[str, int]]:
    """Calls and elements by kind, summed over the rows of ``parts``."""
    out: dict[str, dict[str, int]] = {}
    for r in rows:
        if r.part in parts:
            row = out.setdefault(r.kind, {"calls": 0, "elements": 0})
            row["calls"] += r.calls
            row["elements"] += r.elements
    return dict(sorted(out.items()))


STEP_PARTS = ("layers", "saved shards", "outside layers")  # what one forward+backward issues


def param_bytes(tp: int, model: dict | None = None) -> int:
    """fp32 bytes per rank: split matrices and column-parallel biases /t; LayerNorms, row-parallel biases
    and ``wpe`` replicated; the tied ``wte``/``lm_head`` split by vocabulary (Shoeybi et al. 2019)."""
    cfg = model_config(model)
    h, f, t = cfg.d_model, cfg.ffn_size, tp
    layer = 4 * h + (3 * h * h + 3 * h) // t + h * h // t + h + (f * h + f) // t + f * h // t + h
    return 4 * (cfg.n_layer * layer + cfg.vocab_size * h // t + cfg.seq_len * h + 2 * h)


def activation_bytes(tp: int, sp: bool = False, model: dict | None = None, batch_size: int = 2) -> dict[str, float]:
    """Per layer per rank: Korthikanti et al.'s formula (fp32, 1-byte masks) and the exact count.

    The exact count adds what the formula leaves out: each LayerNorm keeps a mean and a 1/std per
    token, 2 * 4 bytes * b*s (on s/t tokens under SP).
    """
    cfg = model_config(model)
    check(tp, cfg, sp, batch_size)
    shape = ModelShape.from_config(cfg)
    formula = activation_bytes_per_layer(shape, cfg.seq_len, batch_size, 4, 1, tp, sp, "none", cfg.attention)
    return {"formula": formula, "exact": formula + 2 * 2 * 4 * batch_size * cfg.seq_len // (tp if sp else 1)}


@dataclass(frozen=True)
class Row:
    """One measured figure beside the prediction for torch's run and the paper's figure (None: none)."""

    tp: int
    sp: bool
    rank: int
    category: str
    measured: float
    predicted: float
    paper: float | None


def compare(results: list[RankResult]) -> list[Row]:
    """Parameter bytes, activation bytes per layer and collectives per kind, every rank, beside the model."""
    rows = []
    for r in results:
        pred, act = collectives(r.tp, r.sp, r.model, r.batch_size), activation_bytes(r.tp, r.sp, r.model, r.batch_size)
        items = [("parameter bytes", r.param_bytes, param_bytes(r.tp, r.model), None)]
        items += [(f"activation bytes, layer {i}", held, act["exact"], act["formula"])
                  for i, held in enumerate(r.activation_bytes)]
        paper, got = comm_table(pred, ("layers",)), lambda comm, kind, field: comm.get(kind, {}).get(field, 0)
        items += [(f"{kind} {field}", got(r.comm, kind, field), want[field], got(paper, kind, field))
                  for kind, want in comm_table(pred, STEP_PARTS).items() for field in ("calls", "elements")]
        items += [(f"optimizer step {kind} elements", got(r.comm_step, kind, "elements"), want["elements"], None)
                  for kind, want in comm_table(pred, ("optimizer step",)).items()]
        rows += [Row(r.tp, r.sp, r.rank, *item) for item in items]
    return rows


if __name__ == "__main__":  # torchrun --nproc-per-node 2 -m labkit.intra_layer.megatron --sp
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sp", action="store_true", help="sequence parallelism too")
    parser.add_argument("--steps", type=int, default=1)
    a = parser.parse_args()
    ldist.main_under_torchrun(train_tp, sp=a.sp, steps=a.steps)
