# %% [markdown]
# ## Build it yourself: a sharded checkpoint that survives a SIGKILL
#
# Write `save_sharded(state, folder, step)`, called on every rank of a real process group: each rank writes
# its own shard with `torch.save`, and rank 0 commits a manifest that makes the checkpoint visible. Then
# `load_sharded(folder, rank)`, which returns the newest complete checkpoint's step and that rank's state.
# `build.open_stub` copies a stub to `build/sharded_ckpt.py` beside this notebook (once).
#
# `build.check_build` runs your module on **two real ranks** (gloo): a round trip (bit for bit), the calls
# your save makes (fsync before every rename, the manifest committed after the shards and after a
# collective), real `SIGKILL`s half-way through a rank's shard (both ranks must then load one whole
# checkpoint, old or new), and a shard replaced by a pickle that would run code (it must be refused:
# `weights_only=True`). Each bug is named in the feedback. Below it runs on the blank stub.

# %%
from labkit.practice import build

ckpt_path = build.open_stub("06.build.sharded_ckpt")
print(ckpt_path)

# %%
build.check_build("06.build.sharded_ckpt", ckpt_path)
