"""The ZeRO judge's own reference, computed in the trusted process: torch's AdamW on the whole batch with the drawn
hyperparameters (or one of torch's defaults, to recognise an ignored argument), the whole batch's gradient at any
parameters (the learner's own trajectory), and the elements each collective kind moved in a step, from a rank's op
log. The learner's mean over ranks is summed in another order than the whole batch's mean, so parameters are
compared within :data:`TOL` (measured: at most 3e-8 on 2 and 4 ranks with the drawn eps >= 5e-4, which keeps
Adam's g / (sqrt(v) + eps) from amplifying the last bits of a near-zero gradient).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from labkit.practice.build.zero_common import batch, flat, mlp
from labkit.rig.step import optimizer_step

TOL = 2e-6
KINDS = {"reduce_scatter_single": "reduce_scatter", "reduce_scatter_tensor": "reduce_scatter",
         "reduce_scatter": "reduce_scatter", "all_gather_single": "all_gather", "all_gather_into_tensor": "all_gather",
         "all_gather": "all_gather", "all_reduce": "all_reduce", "reduce": "reduce", "broadcast": "broadcast"}
DEFAULTS = {"lr": 1e-3, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.01}


def trajectory(params: dict, **override: Any) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(parameters after step k, the whole batch's mean gradient that step used) with torch's AdamW."""
    hp = {k: params[k] for k in DEFAULTS} | override
    model = mlp(params["width"], params["seed"])
    opt = torch.optim.AdamW(model.parameters(), lr=hp["lr"], betas=tuple(hp["betas"]), eps=hp["eps"],
                            weight_decay=hp["weight_decay"], foreach=False)
    out = []
    for step in range(params["steps"]):
        x, y = batch(params["seed"], step)
        opt.zero_grad(set_to_none=True)
        nn.functional.mse_loss(model(x), y).backward()
        grad = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
        optimizer_step(opt, zero_grad=False)
        out.append((flat(model).clone(), grad.clone()))
    return out


def grad_at(theta: torch.Tensor, params: dict, step: int) -> torch.Tensor:
    """The whole batch's mean gradient of step ``step`` at parameters ``theta`` (the learner's own trajectory)."""
    model = mlp(params["width"], params["seed"])
    torch.nn.utils.vector_to_parameters(theta.to(torch.float32), model.parameters())
    x, y = batch(params["seed"], step)
    nn.functional.mse_loss(model(x), y).backward()
    return torch.cat([p.grad.reshape(-1) for p in model.parameters()])


def traffic(run: dict, rank: int, step: int) -> dict[str, int]:
    """Elements per collective kind that ``rank`` ran in step ``step`` (its backward and its optimizer step)."""
    out: dict[str, int] = {}
    inside = False
    for op in run["ops"][rank]:
        name = op[0]
        if name == f"mark:backward{step}":
            inside = True
        elif name == f"mark:done{step}":
            break
        elif inside and name in KINDS:
            out[KINDS[name]] = out.get(KINDS[name], 0) + int(op[2])
    return out


def pad(t: torch.Tensor, length: int) -> torch.Tensor:
    return torch.cat([t.to(torch.float64), torch.zeros(length - t.numel(), dtype=torch.float64)])


def ratio(seen: list[torch.Tensor], want: list[torch.Tensor]) -> tuple[float, float]:
    """Least-squares ratio of what AdamW saw to the reference, and the residual relative to the reference."""
    s, w = torch.cat(seen), torch.cat(want)
    ratio = float(s @ w / max(float(w @ w), 1e-30))
    return ratio, float((s - ratio * w).norm() / max(float(w.norm()), 1e-30))
