"""An independent correct 06.build.sharded_ckpt (written apart from the reference): one folder per step, the
manifest a small torch file of plain values, the barrier a dist.barrier, sizes checked instead of hashes."""

import os
import tempfile

import torch
import torch.distributed as dist


def _write(obj, final):
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(final), suffix=".part")
    with os.fdopen(fd, "wb") as f:
        torch.save(obj, f)
        f.flush()
        os.fsync(f.fileno())
    os.rename(tmp, final)


def save_sharded(state, folder, step):
    rank = dist.get_rank()
    where = os.path.join(str(folder), f"s{step}")
    os.makedirs(where, exist_ok=True)
    mine = os.path.join(where, f"rank{rank}.bin")
    _write(state, mine)
    dist.barrier()
    if rank == 0:
        sizes = [os.path.getsize(os.path.join(where, f"rank{r}.bin")) for r in range(dist.get_world_size())]
        _write({"step": step, "sizes": sizes}, os.path.join(str(folder), "latest"))
    dist.barrier()


def load_sharded(folder, rank):
    head = os.path.join(str(folder), "latest")
    if not os.path.isfile(head):
        return None
    info = torch.load(head, weights_only=True)
    shard = os.path.join(str(folder), "s{}".format(info["step"]), f"rank{rank}.bin")
    if os.path.getsize(shard) != info["sizes"][rank]:
        raise OSError("shard of the wrong size")
    return info["step"], torch.load(shard, weights_only=True)
