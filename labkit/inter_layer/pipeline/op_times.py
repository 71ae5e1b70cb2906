"""(Runs in a rank.) Each stage's forward and backward timed on its own, apart from the schedule, one rank at a time.

A pipeline step's own action times are a poor input to a replay on a shared CPU: another process that
takes a rank's core for part of a step makes that rank's actions longer for that step only, and the replay
turns the slow patch into a bubble the schedule does not have (issue 40: interleaved p=2 v=2 m=8 replayed at
17% against 1F1B's 15%, and GPipe m=8 below 1F1B m=8 at the same formula). So after the training steps each
rank times one forward and one backward of each of its stages on a micro-batch of the run's size, in
rounds: rank 0's stages, a barrier, rank 1's, a barrier, and again. Serialised, no two ranks compete for
the cores. Each op is timed in CPU seconds of the rank's thread (``time.thread_time``; a rank computes on one
thread, and CPU autograd runs backward on the calling thread), which leaves out the time another process held
the core: wall-clock op times under two busy processes still moved a replayed bubble by 10-15 points. The
medians over the rounds give each stage's cost, uneven stages included (the first embeds, the last computes
the head and the loss), and the spread over rounds shows what remains of the noise.
"""

from __future__ import annotations

import time

import torch
import torch.distributed as dist

from labkit.inter_layer.pipeline.stages import lm_loss


def _once(mod: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, last: bool) -> tuple[float, float]:
    """CPU seconds of one forward (with the loss on the last stage, as the recorder counts it) and one backward."""
    t0 = time.thread_time()
    out = mod(x)
    if last:
        out = lm_loss(out, y)
    t1 = time.thread_time()
    out.backward(None if last else torch.ones_like(out))
    return t1 - t0, time.thread_time() - t1


def time_ops(rank: int, p: int, mods: list[torch.nn.Module], mine: list[int], x: torch.Tensor, y: torch.Tensor,
             d_model: int, rounds: int) -> dict[tuple[int, str], list[float]]:
    """(stage, "F"/"B") -> seconds per round, for this rank's stages; collective (every rank calls it)."""
    n_stages = p * len(mine)
    hidden = torch.randn(x.size(0), x.size(1), d_model, generator=torch.Generator().manual_seed(0))
    out: dict[tuple[int, str], list[float]] = {(s, ph): [] for s in mine for ph in "FB"}
    for k in range(rounds + 1):  # round 0 warms up (allocator, first calls) and is left out
        for turn in range(p):
            if turn == rank:
                for s in mine:
                    inp = x if s == 0 else hidden.clone().requires_grad_(True)
                    f, b = _once(mods[s], inp, y, s == n_stages - 1)
                    if k:
                        out[(s, "F")].append(f)
                        out[(s, "B")].append(b)
            dist.barrier()
    for mod in mods:
        mod.zero_grad(set_to_none=True)
    return out
