"""Build it yourself: ZeRO stage 2 (Rajbhandari et al., "ZeRO", SC 2020, section 5.2).

Stage 1 shards the optimizer states; stage 2 shards the gradients too. The flat parameters, padded to a multiple
of the world size N, are cut into N equal shards as in ZeRO-1 (write shard_bounds as there), and rank r owns
shard r: its AdamW states AND its gradient. No rank keeps a whole gradient: as soon as backward has accumulated a
parameter's gradient (p.register_post_accumulate_grad_hook), each slice of it is reduced to the rank that owns
that slice (dist.reduce(piece, dst=owner): the owner receives the SUM), the owner adds it into its shard's
gradient, and p.grad is set to None. The step:

1. divide the shard's gradient by N (the data-parallel mean);
2. AdamW on this rank's shard;
3. all-gather the updated shards (dist.all_gather_single) and copy them back into the parameters;
4. zero the shard's gradient for the next step.

Memory per rank in fp32: 4 Psi of parameters + (4 + 8) Psi / N of gradients and optimizer states (the paper's
2 Psi + (2 + K) Psi / N in mixed precision). Traffic per step: Psi reduced + Psi all-gathered = 2 Psi, as DDP.
Checked on 2 and 4 ranks, lr, betas, eps and weight decay drawn per run.
Run the check in the notebook: build.check_build("02.build.zero2", path).
"""

from __future__ import annotations

import torch
import torch.distributed as dist


def shard_bounds(numel: int, rank: int, world_size: int) -> tuple[int, int, int]:
    """(start, end, padded): rank's slice [start, end) of ``numel`` flat elements padded to a multiple of
    ``world_size`` (padded is that multiple; every shard has padded // world_size elements)."""
    raise NotImplementedError("shard_bounds")


class Zero2AdamW:
    """AdamW whose states and gradients are sharded over the ranks of the default process group (ZeRO stage 2)."""

    def __init__(self, params: list[torch.nn.Parameter], lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.0) -> None:
        """Keep ``params``; make this rank's shard of the flat parameters (an fp32 tensor that requires grad, with
        a zero .grad of the same size), ``self.optimizer``: a torch.optim.AdamW(..., foreach=False) over that
        shard only, and a post-accumulate-grad hook on every parameter that reduces its gradient's slices to
        their owners and frees p.grad."""
        self.rank, self.world_size = dist.get_rank(), dist.get_world_size()
        raise NotImplementedError("Zero2AdamW.__init__")

    def step(self) -> None:
        """After ``loss.backward()`` (whose hooks already reduced every gradient): average, AdamW on the shard,
        all-gather, write the parameters back, zero the shard's gradient."""
        raise NotImplementedError("Zero2AdamW.step")
