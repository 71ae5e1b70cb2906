"""Build it yourself, notebook 02: ZeRO stage 1 (Rajbhandari et al., "ZeRO", SC 2020, section 5.1), graded on
two real ranks beside torch's own DDP + AdamW.

The learner's ``Zero1AdamW`` trains a tiny MLP (an odd number of parameters, so padding matters) for a few steps
on each rank's half of the batch while, in the same ranks, torch's ``DistributedDataParallel`` + ``AdamW`` trains a
copy, and one process's ``AdamW`` trains another on the whole batch. Checked:

* parameters bit-identical to DDP + AdamW after every step: with two ranks a sum of two numbers does not depend
  on order, and halving is exact, so a reduce-scatter-then-halve equals DDP's all-reduce of halves bit for bit;
* parameters within ``SINGLE_TOL`` of one process on the whole batch: the batch mean is summed in another order
  (two half-batch means averaged), so the last bits differ, and Adam's g/sqrt(v) carries that on;
* optimizer bytes per rank equal to ZeRO's formula, :func:`labkit.predict.estimate.model_state_bytes` (fp32
  moments, 8 bytes per parameter, over N), padding included, measured from the optimizer's own state tensors;
* traffic per step equal to 2 Psi, counted by :class:`labkit.inter_layer.zero.comm.CollectiveCounter` (every
  c10d op the step dispatches), in the paper's convention (:func:`labkit.inter_layer.zero.comm.volume`).

The typical bugs each fail a case named after them: the missing average after the reduce (Adam's first moment is
N times the mean gradient), gradients reduced twice (an all-reduce on top of the reduce-scatter), full optimizer
states on every rank, and the missing all-gather (the ranks' parameters diverge).
"""

from __future__ import annotations

import copy
import time
import warnings
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from labkit.inter_layer.zero.comm import CollectiveCounter, volume
from labkit.practice.build.harness import BuildExercise, launch, load_module, register_build
from labkit.practice.coding import Case
from labkit.predict.estimate import model_state_bytes
from labkit.rig.step import optimizer_step

KEY = "02.build.zero1"
WORLD, STEPS, LR, WD, BETA1 = 2, 3, 1e-2, 0.01, 0.9
SINGLE_TOL = 1e-4  # absolute, on parameters of size ~0.3 after 3 steps of lr 1e-2: see the module docstring
MOMENT_BYTES = 8  # exp_avg and exp_avg_sq in fp32 (ZeRO's K = 8 for fp32 training without master weights)


def mlp(width: int = 31, seed: int = 0) -> nn.Module:
    """8 -> 31 -> 8 with a tanh: 535 parameters, odd, so a 2-way shard needs one element of padding."""
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(8, width), nn.Tanh(), nn.Linear(width, 8))


def _batch(step: int, rows: int = 16) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1000 + step)
    return torch.randn(rows, 8, generator=g), torch.randn(rows, 8, generator=g)


def _flat(model: nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def _state(opt: Any) -> tuple[int, float]:
    """(bytes of the optimizer's state tensors, sum |exp_avg|): what this rank holds, read from torch's own states."""
    inner = getattr(opt, "optimizer", None)
    if not isinstance(inner, torch.optim.Optimizer):
        raise TypeError("Zero1AdamW must set self.optimizer to a torch.optim.AdamW over this rank's shard")
    tensors = [(k, t) for st in inner.state.values() for k, t in st.items() if torch.is_tensor(t) and t.numel() > 1]
    return sum(t.nbytes for _, t in tensors), float(sum(t.abs().sum() for k, t in tensors if k == "exp_avg"))


def zero1_rank(rank: int, world_size: int, path: str, steps: int = STEPS) -> dict[str, Any]:
    """(Runs in a rank.) Train the learner's ZeRO-1 beside DDP + AdamW and one-process AdamW; report what differs."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    warnings.filterwarnings("ignore", category=FutureWarning)  # the *_tensor collectives' deprecation notes
    mod = load_module(path)
    model = mlp()
    ddp_model, single = copy.deepcopy(model), copy.deepcopy(model)
    opt = mod.Zero1AdamW(list(model.parameters()), lr=LR, weight_decay=WD)
    ddp = DDP(ddp_model)
    ref = torch.optim.AdamW(ddp_model.parameters(), lr=LR, weight_decay=WD, foreach=False)
    one = torch.optim.AdamW(single.parameters(), lr=LR, weight_decay=WD, foreach=False)
    loss_fn = nn.MSELoss()
    out: dict[str, Any] = {"numel": sum(p.numel() for p in model.parameters()), "traffic": [], "ddp_diff": [],
                           "single_diff": [], "rank_diff": []}
    for step in range(steps):
        x, y = _batch(step)
        xs, ys = x.chunk(world_size)[rank], y.chunk(world_size)[rank]
        model.zero_grad(set_to_none=True)
        loss_fn(model(xs), ys).backward()
        ref.zero_grad(set_to_none=True)
        loss_fn(ddp(xs), ys).backward()
        counter = CollectiveCounter()
        with counter:
            optimizer_step(opt, zero_grad=False)
        out["traffic"].append({k: dict(v) for k, v in counter.counts.items()})
        if step == 0:
            out["state_bytes"], out["exp_avg_abs"] = _state(opt)
            out["mean_grad_abs"] = float(sum(p.grad.abs().sum() for p in ddp_model.parameters()))
        ref.step()
        one.zero_grad(set_to_none=True)
        loss_fn(single(x), y).backward()
        one.step()
        mine = _flat(model)
        everyone = [torch.empty_like(mine) for _ in range(world_size)]
        dist.all_gather(everyone, mine)
        out["rank_diff"].append(max(float((e - mine).abs().max()) for e in everyone))
        out["ddp_diff"].append(float((mine - _flat(ddp_model)).abs().max()))
        out["single_diff"].append(float((mine - _flat(single)).abs().max()))
    return out


def shard_cases(mod: Any) -> list[Case]:
    """``shard_bounds`` alone, no ranks: padding to a multiple of N and equal, adjacent shards."""
    cases = []
    for numel, world in ((10, 3), (535, 2), (8, 4), (1, 2)):
        padded = -(-numel // world) * world
        want = [(r * padded // world, (r + 1) * padded // world, padded) for r in range(world)]
        try:
            got = [tuple(mod.shard_bounds(numel, r, world)) for r in range(world)]
        except NotImplementedError:
            raise
        except Exception as err:  # noqa: BLE001 - the learner's code may raise anything
            got = [f"raised {type(err).__name__}: {err}"]
        ok = got == want
        cases.append(Case(f"shard_bounds({numel}, r, {world}) pads to {padded}", ok,
                          "" if ok else f"expected {want}, got {got}",
                          ("Is the padded length a multiple of the world size, at least numel?",
                           "padded = ceil(numel / N) * N; shard r is [r * padded/N, (r+1) * padded/N).")))
    return cases


def _traffic_case(r: dict[str, Any], padded: int) -> Case:
    kinds = r["traffic"][0]
    counted = volume(kinds, "nccl")
    named = ", ".join(f"{k} {v['elements']} elements" for k, v in sorted(kinds.items())) or "no collective"
    if "all_reduce" in kinds and "reduce_scatter" in kinds:
        return Case("traffic per step is 2 Psi", False, f"gradients reduced twice: an all-reduce AND a reduce-scatter "
                    f"in one step ({named}): {counted} elements per rank, 2 Psi is {2 * padded}",
                    ("How many times does each gradient element cross the wire in your step?",
                     "The reduce-scatter already sums the gradients over the ranks: drop the all-reduce."))
    if "reduce_scatter" in kinds and "all_gather" not in kinds:
        return Case("traffic per step is 2 Psi", False, f"missing all-gather: the step ran {named}; the updated "
                    "shards never reach the other ranks", ("After AdamW updates your shard, who else has it?",
                                                          "all_gather_into_tensor the shards into the flat "
                                                          "parameters and copy them back into every parameter."))
    ok = counted == 2 * padded
    return Case("traffic per step is 2 Psi", ok, "" if ok else f"{named}: {counted} elements per rank, 2 Psi (padded)"
                f" is {2 * padded}", ("Which two collectives does ZeRO-1 run, and on how many elements each?",
                                      "One reduce-scatter of the padded flat gradients, one all-gather of the "
                                      "padded flat parameters."))


def grade(results: list[dict[str, Any]]) -> list[Case]:
    """Cases from every rank's report (see :func:`zero1_rank`)."""
    r0, n = results[0], len(results)
    numel = r0["numel"]
    padded = -(-numel // n) * n
    formula = model_state_bytes(numel, "fp32", zero_stage=1, dp=n)["optimizer"]
    want_bytes = MOMENT_BYTES * padded // n
    held = [r["state_bytes"] for r in results]
    sharded = all(b == want_bytes for b in held)
    cases = [Case("optimizer states sharded: bytes per rank = 8 Psi / N", sharded,
                  "" if sharded else (f"full optimizer states on every rank (no sharding): {held} bytes per rank"
                                      if all(b >= MOMENT_BYTES * numel for b in held) else f"{held} bytes per rank")
                  + f"; ZeRO-1's formula gives {formula:.0f} (8 Psi / N), {want_bytes} with the padding",
                  ("How many elements does your torch.optim.AdamW hold states for?",
                   "Give AdamW one tensor: this rank's shard of the flat parameters, padded // N elements."))]
    cases.append(_traffic_case(r0, padded))
    seen = sum(r["exp_avg_abs"] for r in results) if sharded else r0["exp_avg_abs"]
    ratio = seen / ((1 - BETA1) * r0["mean_grad_abs"])
    mean_ok = abs(ratio - 1) < 1e-3
    twice = "all_reduce" in r0["traffic"][0] and "reduce_scatter" in r0["traffic"][0]
    what = ("gradients reduced twice: " if twice else "missing average after the reduce (sum instead of mean): ")
    cases.append(Case("AdamW sees the mean gradient over the ranks", mean_ok, "" if mean_ok else
                      f"{what}Adam's first moment is {ratio:.3g} x what the mean gradient gives (N = {n})",
                      ("After the reduce-scatter, is your gradient the sum over the ranks or their mean?",
                       "Divide the reduced shard by the world size before AdamW, exactly once.")))
    apart = next((i for i, d in enumerate(r0["rank_diff"]) if d > 0), None)
    cases.append(Case("every rank holds the same parameters after each step", apart is None, "" if apart is None else
                      f"missing all-gather: the ranks' parameters diverge after step {apart + 1} "
                      f"(by up to {r0['rank_diff'][apart]:.3g})",
                      ("After the step, does every rank's model see the other ranks' updated shards?",
                       "All-gather the updated shards and copy the whole flat vector into the parameters.")))
    ddp = max(r0["ddp_diff"])
    cases.append(Case(f"parameters bit-identical to torch's DDP + AdamW after {len(r0['ddp_diff'])} steps",
                      ddp == 0, "" if ddp == 0 else f"largest difference {ddp:.3g}"))
    single = max(r0["single_diff"])
    cases.append(Case(f"parameters within {SINGLE_TOL:g} of one process's AdamW on the whole batch",
                      single <= SINGLE_TOL, "" if single <= SINGLE_TOL else f"largest difference {single:.3g}"))
    return cases


def run(path: Path) -> list[Case]:
    """Grade the module at ``path``: ``shard_bounds`` alone, then the optimizer on two real ranks."""
    cases = shard_cases(load_module(path))
    results, failed = launch(zero1_rank, WORLD, path, what="trains with your Zero1AdamW")
    return cases + ([failed] if failed else grade(results))


register_build(BuildExercise(
    key=KEY, stub="zero1.py",
    task="Write shard_bounds(numel, rank, world_size) -> (start, end, padded) and class Zero1AdamW(params, lr, "
         "betas, eps, weight_decay) with .optimizer (a torch.optim.AdamW over this rank's shard) and .step(): "
         "reduce-scatter the flat padded gradients, average, AdamW on the shard, all-gather the parameters.",
    run=run,
    hint=("Which part of the optimizer does rank r own, and what does it need from the other ranks to update it?",
          "Flatten and pad; reduce-scatter the gradients (then divide by N); AdamW on your shard; all-gather."),
    worked="Pad the flat parameters to a multiple of N; rank r owns elements [r*S, (r+1)*S), S = padded/N, and "
           "runs torch's AdamW on that slice only (8 bytes of states per element: 8 Psi / N per rank). Each step: "
           "flatten and pad the gradients, reduce_scatter_tensor them (rank r gets the sum of slice r), divide by N, "
           "step AdamW, all_gather_into_tensor the updated slices and copy the flat vector back into the parameters.",
))


def bench_rank(rank: int, world_size: int, path: str, width: int = 512, steps: int = 5) -> dict[str, float]:
    """(Runs in a rank.) Seconds per step and optimizer bytes: the learner's ZeRO-1 beside torch's
    ``ZeroRedundancyOptimizer`` on the same MLP (shown, never asserted: the ranks share the machine's cores)."""
    from torch.distributed.optim import ZeroRedundancyOptimizer

    mod, out = load_module(path), {}
    for name in ("yours", "torch"):
        model = mlp(width)
        params = list(model.parameters())
        opt = mod.Zero1AdamW(params, lr=LR) if name == "yours" else ZeroRedundancyOptimizer(
            params, optimizer_class=torch.optim.AdamW, lr=LR)  # fmt: skip
        x, y = _batch(0, 64)
        start = time.perf_counter()
        for _ in range(steps):
            model.zero_grad(set_to_none=True)
            nn.functional.mse_loss(model(x), y).backward()
            if name == "torch":
                for p in params:
                    dist.all_reduce(p.grad)  # ZeroRedundancyOptimizer leaves the gradient reduction to DDP
                    p.grad /= world_size
            optimizer_step(opt, zero_grad=False)
        out[f"{name}_s_per_step"] = (time.perf_counter() - start) / steps
        inner = opt.optimizer if name == "yours" else opt.optim
        out[f"{name}_optimizer_bytes"] = sum(t.nbytes for st in inner.state.values() for t in st.values()
                                             if torch.is_tensor(t) and t.numel() > 1)
    return out


def benchmark(path: str | Path, width: int = 512) -> dict[str, float]:
    """Rank 0's seconds per step and optimizer bytes, yours beside torch's ZeroRedundancyOptimizer (2 ranks)."""
    results, failed = launch(bench_rank, WORLD, path, what="benchmark", width=width)
    if failed:
        raise RuntimeError(failed.detail)
    return results[0]
