# %% [markdown]
# ## Build it yourself: ZeRO stage 1
#
# Write ZeRO-1 in a module of your own: `build.open_stub` copies a stub to `build/zero1.py` beside this
# notebook (once; it never overwrites your work). Fill in `shard_bounds` and `Zero1AdamW`: pad the flat
# parameters to a multiple of the world size N, keep AdamW's states for your 1/N shard only,
# reduce-scatter the gradients, average them, step, all-gather the parameters.
#
# `build.check_build` runs your module on **two real ranks** (gloo) beside torch's own DDP + AdamW, and
# checks: parameters bit-identical to DDP after three steps (and within 1e-4 of one process on the whole
# batch: the batch mean is summed in another order), optimizer bytes per rank equal to ZeRO's 8Ψ/N, and
# traffic per step equal to 2Ψ (counted from every collective your step runs). A typical bug is named in
# the feedback; each failed try shows one more hint. Below it runs on the blank stub: "not written yet".

# %%
from labkit.practice import build
from labkit.practice.build import zero1 as build_zero1

zero1_path = build.open_stub("02.build.zero1")
print(zero1_path)

# %%
build.check_build("02.build.zero1", zero1_path)

# %% tags=["nbval-ignore-output"]
# When your module passes: seconds per step and optimizer bytes per rank, yours beside torch's
# ZeroRedundancyOptimizer on a wider MLP (times are shown, never checked).
# build_zero1.benchmark(zero1_path)
