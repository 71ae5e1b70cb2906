# %% [markdown]
# ## Build it yourself: Megatron's tensor-parallel layers
#
# Write Megatron's two conjugate operators yourself, forward **and** backward, as `torch.autograd.Function`:
# f (`CopyToParallel`: identity forward, all-reduce of the gradient backward) and g (`ReduceFromParallel`:
# all-reduce forward, identity backward). On them build `column_shard`, `row_shard`, `ColumnParallelLinear`,
# `RowParallelLinear` and `ParallelMLP`. `build.open_stub` copies a stub to `build/tp_layers.py` beside this
# notebook (once; it never overwrites your work).
#
# `build.check_build` runs your module on **two real ranks** (gloo) beside the dense `nn.Linear` block and
# checks f and g one by one (also on a sliced, non-contiguous tensor), the two weight splits, then the
# MLP's output, input gradient and weight gradients: equal to the dense block within 1e-5 in float32, not
# bit for bit, because the row-parallel layer adds its partial sums in another order than one matmul does.
# Typical bugs (f's backward without its all-reduce, g reducing in both directions, a missing
# `.contiguous()`, the wrong weight dimension split) are named in the feedback; each failed try shows one
# more hint. Below it runs on the blank stub: "not written yet".

# %%
from labkit.practice import build

tp_path = build.open_stub("03.build.tp_layers")
print(tp_path)

# %%
build.check_build("03.build.tp_layers", tp_path)

# %% tags=["nbval-ignore-output"]
# When your module passes: seconds per step and bytes all-reduced, your MLP beside torch's DTensor
# ColwiseParallel/RowwiseParallel (predicted: 2 all-reduces of tokens x h floats; times are shown, never checked).
# from labkit.practice.build import tp_layers as build_tp
# build_tp.benchmark(tp_path)
