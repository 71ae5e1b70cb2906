"""An in-memory checkpoint kept by a peer rank, restored without touching the disk.

Gemini (Wang et al., SOSP 2023) checkpoints to the CPU memory of other machines instead of
remote storage: memory is far faster than a shared file system, so it can checkpoint every
iteration, and a machine that fails gets its state back from a peer's copy. Here each of
``world`` ranks trains its own state (different on every rank, as a shard would be); every
``every`` steps each rank flattens its state into one byte buffer and the group
all-gathers them, so rank ``r`` keeps its own copy and that of rank ``r + 1`` (mod world)
in CPU memory. Then rank ``failed_rank`` loses its trainer (a restart: a fresh Trainer of
the same config, back at step 0), the holder of its copy sends it back (a broadcast of a JSON layout and
the bytes: data, never code), every rank rolls back to the snapshot, replays the lost
steps, and compares bits with its first pass.

Run it with ``labkit.dist.run(peer_worker, 2, ...)``: a real gloo group of processes.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist

from labkit.errors import require_positive
from labkit.resilience.state import digest, flat_state, from_bytes, restore, to_bytes
from labkit.resilience.worker import micro_config
from labkit.rig.train import Trainer


@dataclass(frozen=True)
class PeerRecovery:
    """One rank's view: whose copy it held, where its state came back from, and whether bits matched."""

    rank: int
    holds_copy_of: int
    snapshot_step: int
    failed_at_step: int
    restored_from: str  # "peer memory" (the restarted rank) or "own memory" (the others roll back)
    state_bytes: int
    differed_before_restore: bool
    restored_bit_identical: bool
    replay_bit_identical: bool


def _all_gather_bytes(t: torch.Tensor, world: int) -> list[torch.Tensor]:
    """All-gather uint8 buffers of any length (padded to the longest, then cut back)."""
    sizes = [torch.zeros(1, dtype=torch.int64) for _ in range(world)]
    dist.all_gather(sizes, torch.tensor([t.numel()]))
    longest = max(int(n) for n in sizes)
    out = [torch.empty(longest, dtype=torch.uint8) for _ in range(world)]
    dist.all_gather(out, torch.cat([t, torch.zeros(longest - t.numel(), dtype=torch.uint8)]))
    return [o[: int(n)] for o, n in zip(out, sizes, strict=True)]


def _text(s: str) -> torch.Tensor:
    return torch.tensor(list(s.encode()), dtype=torch.uint8)


def _broadcast_bytes(t: torch.Tensor | None, src: int) -> torch.Tensor:
    """Broadcast one uint8 buffer from ``src`` (its length first)."""
    n = torch.tensor([t.numel() if t is not None else 0])
    dist.broadcast(n, src=src)
    buf = t if t is not None else torch.empty(int(n), dtype=torch.uint8)
    dist.broadcast(buf, src=src)
    return buf


def peer_worker(rank: int, world: int, steps: int = 6, every: int = 3, failed_rank: int = 1,
                seed: int = 0) -> PeerRecovery:
    """Train, snapshot to peer memory, lose ``failed_rank``'s trainer, restore it from the peer, replay."""
    require_positive("steps", steps)
    require_positive("every", every)
    trainer = Trainer(micro_config(seed=seed + rank))  # each rank's state differs, like a shard
    trainer.run(every)
    layout, mine = to_bytes({k: v.clone() for k, v in flat_state(trainer, rank).items()})
    peer = (rank + 1) % world
    held_layout = bytes(_all_gather_bytes(_text(layout), world)[peer].numpy()).decode()
    held = _all_gather_bytes(mine, world)[peer].clone()  # the snapshot goes to a peer's CPU memory
    snapshot_digest, snapshot_step = digest(from_bytes(layout, mine)), trainer.steps_done
    first_pass = trainer.run(steps - every) if steps > every else []
    first_digest, failed_at = digest(flat_state(trainer, rank)), trainer.steps_done
    if rank == failed_rank:  # the restart: everything this rank had in memory is gone
        del trainer, mine, layout
        trainer = Trainer(micro_config(seed=seed + rank))  # a new process: step-0 weights, empty optimizer
    holder = (failed_rank - 1) % world
    got_layout = _broadcast_bytes(_text(held_layout) if rank == holder else None, holder)
    got = _broadcast_bytes(held if rank == holder else None, holder)
    if rank == failed_rank:
        layout, mine = bytes(got_layout.numpy()).decode(), got
    differed = digest(flat_state(trainer, rank)) != snapshot_digest
    restore(trainer, from_bytes(layout, mine), rank)
    restored_ok = digest(flat_state(trainer, rank)) == snapshot_digest
    replay = trainer.run(steps - every) if steps > every else []
    replay_ok = replay == first_pass and digest(flat_state(trainer, rank)) == first_digest
    return PeerRecovery(rank, peer, snapshot_step, failed_at, "peer memory" if rank == failed_rank else "own memory",
                        int(mine.numel()), differed, restored_ok, replay_ok)
