"""What ZeRO-1 and ZeRO-2's build-its share: the drawn run, the rank that trains the learner's optimizer, and
the judge's own reference (Rajbhandari et al., "ZeRO", SC 2020, sections 5.1-5.2).

The run: a tiny MLP whose parameter count is odd (so a 2-, 3- or 4-way shard needs padding), trained for a few
steps with AdamW hyperparameters drawn per run (lr, betas, eps large enough that ignoring it shows, weight decay),
each rank on its slice of the batch. The rank (:func:`zero_rank`, untrusted side) answers the ``shard_bounds``
questions (rank 0 of the first run, before it trains), then records plain data only: the flat parameters after
each step, the gradient the learner's inner ``torch.optim.AdamW`` saw, the bytes of its states, the gradient bytes
the model still holds after backward, and (through the op log) every collective with its size, step by step. The
judge (:mod:`labkit.practice.build.zero_judge`) recomputes everything from the parameters in its own process.
"""

from __future__ import annotations

import math
import random
from typing import Any

import torch
from torch import nn

from labkit.practice.build.records import OpLog, load_module, recording
from labkit.rig.step import optimizer_step

STEPS, ROWS, IN = 3, 24, 8  # 24 rows: an equal slice on 2, 3 and 4 ranks (the mean of the means is the mean)
MOMENT_BYTES = 8  # exp_avg and exp_avg_sq in fp32 (ZeRO's K = 8 for fp32 training without master weights)


def draw(seed: int) -> dict[str, Any]:
    """The run's parameters: world sizes 2 and 4, a hidden width that makes the parameter count odd, AdamW's
    hyperparameters away from torch's defaults (so a module that ignores one is caught)."""
    rng = random.Random(seed)
    return {"worlds": [2, 4], "width": rng.randrange(19, 43, 2), "steps": STEPS,
            "lr": round(rng.uniform(4e-3, 2e-2), 5),
            "betas": [round(rng.uniform(0.75, 0.85), 3), round(rng.uniform(0.95, 0.98), 4)],
            "eps": round(10 ** rng.uniform(-3.3, -2.7), 6), "weight_decay": round(rng.uniform(0.1, 0.3), 3)}


def numel_of(width: int) -> int:
    """Parameters of the 8 -> width -> 8 MLP: 17 width + 8 (odd for an odd width)."""
    return IN * width + width + width * IN + IN


def padded(numel: int, world: int) -> int:
    """``numel`` rounded up to a multiple of ``world``: the flat length every rank's shard is cut from."""
    return math.ceil(numel / world) * world


def mlp(width: int, seed: int) -> nn.Module:
    """The model every side builds from the same seed."""
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(IN, width), nn.Tanh(), nn.Linear(width, IN))


def batch(seed: int, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Step ``step``'s whole batch (every rank takes its slice of the rows)."""
    g = torch.Generator().manual_seed(seed * 1000 + step)
    return torch.randn(ROWS, IN, generator=g), torch.randn(ROWS, IN, generator=g)


def flat(model: nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def _inner(opt: Any, cls: str) -> torch.optim.Optimizer:
    inner = getattr(opt, "optimizer", None)
    if not isinstance(inner, torch.optim.Optimizer):
        raise TypeError(f"{cls} must set self.optimizer to a torch.optim.AdamW over this rank's shard")
    return inner


def zero_rank(rank: int, world_size: int, log: OpLog, path: str, params: dict, cls: str) -> dict[str, Any]:
    """(Runs in a rank, UNTRUSTED.) Train with the learner's ``cls``; record what it did, step by step."""
    with recording(log):
        mod = load_module(path)
    asked = _bounds(mod, params["bounds"]) if rank == 0 and params.get("bounds") else None
    with recording(log):
        model = mlp(params["width"], params["seed"])
        opt = getattr(mod, cls)(list(model.parameters()), lr=params["lr"], betas=tuple(params["betas"]),
                                eps=params["eps"], weight_decay=params["weight_decay"])
    inner = _inner(opt, cls)
    mine = [p for g in inner.param_groups for p in g["params"]]
    log.note("inner_numel", sum(p.numel() for p in mine))
    seen: list[torch.Tensor] = []  # what AdamW's step saw, taken by a step pre-hook (the module may reset it after)
    inner.register_step_pre_hook(lambda *_: seen.append(torch.cat(
        [p.grad.detach().reshape(-1).clone() for p in mine if p.grad is not None] or [torch.zeros(0)])))
    steps = []
    for step in range(params["steps"]):
        x, y = batch(params["seed"], step)
        model.zero_grad(set_to_none=True)
        with recording(log):
            log.mark(f"backward{step}")
            nn.functional.mse_loss(model(x.chunk(world_size)[rank]), y.chunk(world_size)[rank]).backward()
            held = sum(p.grad.nbytes for p in model.parameters() if p.grad is not None)
            log.mark(f"step{step}")
            optimizer_step(opt, zero_grad=False)  # the learner's optimizer; gradients were zeroed above
            log.mark(f"done{step}")
        steps.append({"params": flat(model).clone(), "inner_grad": seen[-1] if seen else torch.zeros(0),
                      "held_grad_bytes": int(held), "inner_steps": len(seen)})
    state = [t for st in inner.state.values() for t in st.values() if torch.is_tensor(t) and t.numel() > 1]
    return {"steps": steps, "state_bytes": int(sum(t.nbytes for t in state)),
            "inner_numel": int(sum(p.numel() for p in mine)), **({"bounds": asked} if asked is not None else {})}


def _bounds(mod: Any, cases: list) -> list:
    """(In a rank, UNTRUSTED.) The learner's ``shard_bounds`` for each (numel, world): its answer per rank, or what
    it raised (NotImplementedError passes: the module is not written yet)."""
    out: list = []
    for numel, world in cases:
        try:
            out.append([[int(v) for v in mod.shard_bounds(numel, r, world)] for r in range(world)])
        except NotImplementedError:
            raise
        except Exception as err:  # noqa: BLE001 - the learner's code may raise anything
            out.append(f"raised {type(err).__name__}: {err}"[:300])
    return out
