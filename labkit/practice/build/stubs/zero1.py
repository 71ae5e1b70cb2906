"""Build it yourself: ZeRO stage 1 (Rajbhandari et al., "ZeRO", SC 2020, section 5.1).

Every rank keeps the whole model, but only 1/N of the optimizer states: the flat parameters, padded to a
multiple of the world size N, are cut into N equal shards, and rank r runs AdamW on shard r only. A step:

1. reduce-scatter the gradients (flat, padded): rank r receives the SUM of shard r over the ranks;
2. divide by N (the data-parallel mean, what DDP gives);
3. AdamW on this rank's shard;
4. all-gather the updated shards, and copy them back into the parameters.

Traffic per step: a reduce-scatter of Psi elements and an all-gather of Psi: 2 Psi, the same as DDP.
Use torch.distributed (dist.reduce_scatter_single, dist.all_gather_single: torch 2.13 deprecates the older
*_tensor names); the group is already set up. Checked on 2 and 4 ranks, lr, betas, eps and weight decay drawn per run.
Run the check in the notebook: build.check_build("02.build.zero1", path).
"""

from __future__ import annotations

import torch
import torch.distributed as dist


def shard_bounds(numel: int, rank: int, world_size: int) -> tuple[int, int, int]:
    """(start, end, padded): rank's slice [start, end) of ``numel`` flat elements padded to a multiple of
    ``world_size`` (padded is that multiple; every shard has padded // world_size elements)."""
    raise NotImplementedError("shard_bounds")


class Zero1AdamW:
    """AdamW whose states are sharded over the ranks of the default process group (ZeRO stage 1)."""

    def __init__(self, params: list[torch.nn.Parameter], lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.0) -> None:
        """Keep ``params``; make this rank's shard of the flat parameters (an fp32 tensor that requires grad)
        and ``self.optimizer``: a torch.optim.AdamW(..., foreach=False) over that shard only."""
        self.rank, self.world_size = dist.get_rank(), dist.get_world_size()
        raise NotImplementedError("Zero1AdamW.__init__")

    def step(self) -> None:
        """After each rank's ``loss.backward()`` on its own batch: reduce-scatter, average, AdamW on the shard,
        all-gather, write the parameters back."""
        raise NotImplementedError("Zero1AdamW.step")
