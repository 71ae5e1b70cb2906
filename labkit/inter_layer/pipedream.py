"""PipeDream: an asynchronous 1F1B pipeline with weight stashing, written by hand.

torch ships synchronous pipelines only (``torch.distributed.pipelining`` flushes and updates once per
step); nothing in it runs PipeDream (Narayanan et al., "PipeDream: Generalized Pipeline Parallelism
for DNN Training", SOSP 2019) or PipeDream-2BW (Narayanan et al., "Memory-Efficient Pipeline-Parallel
DNN Training", ICML 2021). This is a small one, so a learner can count the weight versions it keeps:

* p stages on p ranks, each a run of consecutive blocks of the tiny GPT (embeddings on stage 0, final
  norm, head and loss on the last); activations go forward and gradients backward by explicit
  ``torch.distributed`` send/recv. The head is untied from the embedding: the two live on different
  stages, so a tie would need a cross-stage all-reduce after every update (Megatron's embedding
  group), and with asynchronous updates the two copies would sit at different versions anyway.
* 1F1B with no flush: stage r admits p - r mini-batches, then alternates one backward and one forward
  (``labkit.sim.schedule("1f1b", ...)``). Each mini-batch is one micro-batch, and each stage steps
  AdamW after every backward, so later forwards run on weights that earlier mini-batches updated.
* ``stash``: "pipedream" pins, for every in-flight mini-batch, the version its forward used (the
  newest), and its backward computes with exactly that version: p - r versions on stage r, p on the
  first. "2bw" (double-buffered weights) applies the mean gradient every ``every`` (>= p, default p)
  mini-batches, so in-flight mini-batches use one version and new ones the next: two at most; the
  update thus uses gradients of the previous version, W(t+1) = W(t) - lr * grad f(W(t-1)), as in the
  2BW paper. "none" stashes nothing: the backward reads whatever the weights are now, while the
  activations it multiplies came from older weights, so the gradient belongs to no single version.
* No vertical sync: each stage uses its own newest version for a mini-batch, whatever version the
  stage before it used (PipeDream's default; its paper makes vertical sync optional).

Mechanics: a version is a list of leaf tensors, and the stage module sits on the meta device and runs
through ``torch.func.functional_call`` with a version's tensors. AdamW steps the live version in place
unless an in-flight mini-batch pinned it; then the live version is cloned first and the optimizer is
pointed at the clone, so a pinned version is never written (autograd's version counter would raise if
it were). "none" runs forwards on ``.data`` aliases, which hides the in-place update from that check,
as a naive asynchronous pipeline would. Versions held are distinct storages; bytes are counted by
storage. ``verify`` recomputes every backward in isolation from a copy of the forward's weights: the
true gradient of the mini-batch at the weights its forward used, given the same incoming gradient;
``grad_error`` is the relative distance of the gradient the stage applied from it. ``pipedream_runs``
runs the stages on local ranks and compares the modes.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.func import functional_call

from labkit import dist as labdist
from labkit.errors import LabkitError, require_choice, require_divides, require_positive
from labkit.rig.data import batches, vocab_size
from labkit.rig.model import GPTConfig, TinyGPT, config_from
from labkit.rig.step import optimizer_step
from labkit.rig.train import study_dtype
from labkit.sim import schedule

STASH_MODES = ("pipedream", "2bw", "none")
DEFAULT_MODEL: dict[str, Any] = {"n_layer": 4, "n_head": 4, "d_model": 64, "seq_len": 32}


def model_config(model: dict[str, Any] | None = None) -> GPTConfig:
    """The GPT of ``DEFAULT_MODEL`` updated by ``model``; dropout must be 0 (a mask would need stashing too)."""
    return config_from({"vocab_size": vocab_size(), "dropout": 0.0, **DEFAULT_MODEL}, model,
                       no_dropout="a dropout mask would need stashing too")


def check_options(p: int, minibatches: int, stash: str, cfg: GPTConfig, every: int = 0) -> int:
    """Validate a run; return the 2BW update interval (``every``, default p)."""
    require_choice("stash", stash, STASH_MODES)
    require_positive("p", p)
    require_divides("p", p, "n_layer", cfg.n_layer)
    require_positive("minibatches", minibatches)
    if minibatches < p:
        raise LabkitError(f"minibatches must be an integer >= p={p}: the first stage admits p (got {minibatches})")
    every = every or p
    if stash == "2bw" and (not isinstance(every, int) or every < p):
        raise LabkitError(f"every must be an integer >= p={p} for stash='2bw', or two versions do not suffice "
                          f"(got {every})")
    return every


class Stage(nn.Module):
    """Blocks of one stage; stage 0 adds the embeddings, the last the final norm, the head and the loss."""

    def __init__(self, gpt: TinyGPT, rank: int, p: int) -> None:
        super().__init__()
        n = gpt.cfg.n_layer // p
        self.first, self.last = rank == 0, rank == p - 1
        self.wte, self.wpe = (gpt.wte, gpt.wpe) if self.first else (None, None)
        self.h = nn.ModuleList(gpt.h[rank * n : (rank + 1) * n])
        self.ln_f, self.lm_head = (gpt.ln_f, gpt.lm_head) if self.last else (None, None)

    def forward(self, x: torch.Tensor, y: torch.Tensor | None = None) -> torch.Tensor:
        """Activations (b, s, h) out, or the mean cross-entropy on the last stage."""
        if self.first:
            x = self.wte(x) + self.wpe(torch.arange(x.size(1), device=x.device))
        for block in self.h:
            x = block(x)
        if not self.last:
            return x
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), y.view(-1))


def build_stage(cfg: GPTConfig, seed: int, rank: int, p: int, dtype: str = "fp32") -> Stage:
    """Stage ``rank`` of the seeded GPT with the head untied (every rank builds the same full model).

    ``dtype="fp64"`` is for studies that print figures from trained floats (a gradient error at a high
    learning rate): their fp32 bits drift with the CPU's kernels, their fp64 ones do not reach the print."""
    dt = study_dtype(dtype)
    torch.manual_seed(seed)
    gpt = TinyGPT(cfg)
    gpt.lm_head.weight = nn.Parameter(gpt.wte.weight.detach().clone())
    return Stage(gpt, rank, p).to(dt)


def repoint(opt: torch.optim.Optimizer, old: list[torch.Tensor], new: list[torch.Tensor]) -> None:
    """Make ``opt`` step ``new`` instead of ``old``, carrying AdamW's moments over (copy on write)."""
    for o, n in zip(old, new, strict=True):
        if o in opt.state:
            opt.state[n] = opt.state.pop(o)
    opt.param_groups[0]["params"] = list(new)


def checksum(tensors: list[torch.Tensor]) -> str:
    """SHA-256 of the tensors' bytes: equal checksums mean bit-identical weights."""
    h = hashlib.sha256()
    for t in tensors:
        h.update(t.detach().cpu().numpy().tobytes())
    return h.hexdigest()[:16]


@dataclass(frozen=True)
class StageReport:
    """What one stage held and did; lists are indexed by mini-batch unless said otherwise."""

    rank: int
    stash: str
    stage_params: int
    stage_param_bytes: int
    max_versions: int  # most weight versions held at once
    max_stash_bytes: int  # bytes of those versions, counted by storage
    updates: int
    losses: list[float]  # last stage only
    order: list[str]  # actions in program order, "<stage><F|B><mini-batch>"
    forward_checksums: list[str]  # of the weights the forward used
    backward_checksums: list[str]  # of the same tensors when the backward ran
    delay: list[int]  # updates this stage applied between forward and backward
    isolation_max_diff: list[float] = field(default_factory=list)  # |grad - grad in isolation|, with verify
    grad_error: list[float] = field(default_factory=list)  # ||grad - grad in isolation|| / ||grad in isolation||


@dataclass
class _Version:
    """One weight version of a stage: its leaf tensors and how many in-flight mini-batches pinned it."""

    tensors: list[torch.Tensor]
    users: int = 0


def _device() -> torch.device:
    if dist.is_initialized() and dist.get_backend() == "nccl":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def train_pipedream(rank: int, world_size: int, minibatches: int, stash: str = "pipedream",
                    model: dict[str, Any] | None = None, batch_size: int = 8, seed: int = 0, lr: float = 3e-3,
                    every: int = 0, verify: bool = False, dtype: str = "fp32") -> dict[str, Any]:
    """One stage of the asynchronous pipeline (a ``labkit.dist.run`` worker); returns a StageReport as a dict."""
    cfg = model_config(model)
    every = check_options(world_size, minibatches, stash, cfg, every)
    p, dev = world_size, _device()
    stage = build_stage(cfg, seed, rank, p, dtype)
    names = [n for n, _ in stage.named_parameters()]
    buffers = {n: b.to(dev) for n, b in stage.named_buffers()}
    live = [w.detach().to(dev).clone().requires_grad_() for w in stage.parameters()]
    stage.to("meta")  # the module keeps the structure; the weights live in the versions
    opt = torch.optim.AdamW(live, lr=lr, weight_decay=0.0, foreach=False)
    versions, newest, updates = {0: _Version(live)}, 0, 0
    data, shape = batches(batch_size, cfg.seq_len, seed), (batch_size, cfg.seq_len, cfg.d_model)
    inflight: dict[int, tuple] = {}
    fwd_sum, bwd_sum, delay, diff, rel = {}, {}, {}, {}, {}
    losses, sends, pending, backwards = [], [], None, 0
    max_versions = max_bytes = 0

    def run_stage(weights: list[torch.Tensor], x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return functional_call(stage, (dict(zip(names, weights, strict=True)), buffers), (x, y))

    def forward(i: int) -> None:
        x, y = (t.to(dev) for t in data(i))
        if not stage.first:
            x = torch.empty(shape, device=dev, dtype=study_dtype(dtype))
            dist.recv(x, rank - 1)
            x.requires_grad_()
        v = versions[newest]
        used = v.tensors if stash != "none" else [t.data.requires_grad_() for t in v.tensors]
        v.users += 1
        out = run_stage(used, x, y)
        if stage.last:
            losses.append(out.item())
        else:
            sends.append((out.detach(), dist.isend(out.detach(), rank + 1)))
        fwd_sum[i] = checksum(used)
        ref = [t.detach().clone() for t in used] if verify else None
        inflight[i] = (newest, used, x, y, out, ref, updates)

    def backward(i: int) -> None:
        vid, used, x, y, out, ref, at = inflight.pop(i)
        g = None
        if not stage.last:
            g = torch.empty(shape, device=dev, dtype=study_dtype(dtype))
            dist.recv(g, rank + 1)
        bwd_sum[i], delay[i] = checksum(used), updates - at
        grads = list(torch.autograd.grad(out, [*used, x] if x.requires_grad else used, g))
        if x.requires_grad:
            dx = grads.pop()
            sends.append((dx, dist.isend(dx, rank - 1)))
        if verify:
            w = [t.clone().requires_grad_() for t in ref]
            alone = torch.autograd.grad(run_stage(w, x.detach().requires_grad_(x.requires_grad), y), w, g)
            diff[i] = max(float((a - b).abs().max()) for a, b in zip(grads, alone, strict=True))
            off = sum(float((a - b).double().square().sum()) for a, b in zip(grads, alone, strict=True))
            rel[i] = (off / max(sum(float(b.double().square().sum()) for b in alone), 1e-300)) ** 0.5
        versions[vid].users -= 1
        if versions[vid].users == 0 and vid != newest:
            del versions[vid]
        update(grads)

    def update(grads: list[torch.Tensor]) -> None:
        nonlocal newest, updates, pending, backwards
        backwards += 1
        pending = grads if pending is None else [a + b for a, b in zip(pending, grads, strict=True)]
        if stash == "2bw" and backwards % every:
            return
        scale, pending_now, pending = (1.0 / every if stash == "2bw" else 1.0), pending, None
        v = versions[newest]
        if stash != "none" and v.users:  # pinned by an in-flight mini-batch: copy on write
            fresh = [t.detach().clone().requires_grad_() for t in v.tensors]
            repoint(opt, v.tensors, fresh)
            newest += 1
            versions[newest] = _Version(fresh)
        for t, gr in zip(versions[newest].tensors, pending_now, strict=True):
            t.grad = gr * scale
        optimizer_step(opt)
        updates += 1

    order = schedule("1f1b", p, minibatches)[rank]
    for act in order:
        (forward if act.phase == "F" else backward)(act.microbatch)
        sends = [(t, work) for t, work in sends if not work.is_completed()]  # a send's buffer lives until it is done
        held = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes()
                for ts in [v.tensors for v in versions.values()] + [f[1] for f in inflight.values()] for t in ts}
        max_versions, max_bytes = max(max_versions, len(versions)), max(max_bytes, sum(held.values()))
    for _, work in sends:
        work.wait()
    live = versions[newest].tensors
    report = StageReport(
        rank, stash, sum(t.numel() for t in live), sum(t.nbytes for t in live), max_versions, max_bytes, updates,
        losses, [str(a) for a in order], [fwd_sum[i] for i in range(minibatches)],
        [bwd_sum[i] for i in range(minibatches)], [delay[i] for i in range(minibatches)],
        [diff[i] for i in range(minibatches)] if verify else [],
        [rel[i] for i in range(minibatches)] if verify else [],
    )  # fmt: skip
    return asdict(report)


if __name__ == "__main__":  # torchrun --nproc-per-node 4 -m labkit.inter_layer.pipedream [stash] [minibatches]
    import sys

    labdist.main_under_torchrun(train_pipedream, stash=sys.argv[1] if len(sys.argv) > 1 else "pipedream",
                                minibatches=int(sys.argv[2]) if len(sys.argv) > 2 else 16)
