# %% [markdown]
# ## Build it yourself: activation offload to files
#
# Write the core of vDNN yourself: `FileOffload(folder, model)`, a `torch.autograd.graph.saved_tensors_hooks`
# whose `pack` writes every saved tensor that is not a parameter to one raw file and returns a small handle,
# and whose `unpack` reads it back in backward and removes the file. `build.open_stub` copies a stub to
# `build/act_offload.py` beside this notebook (once; it never overwrites your work).
#
# `build.check_build` runs a tiny MLP in float32 and bfloat16 under your hooks and checks: gradients
# bit-identical to the run without offload, bytes on disk after forward equal to labkit's saved-tensor
# prediction (each saved storage once, parameters left out), nothing kept in memory besides the files,
# every dtype intact (numpy has no bf16: view it as int16) and no file left behind. The typical bugs
# (parameters offloaded too, tensors kept as well as written, a lost dtype, leaking files) are named in the
# feedback. Below it runs on the blank stub: "not written yet".

# %%
from labkit.practice import build

offload_path = build.open_stub("04.build.act_offload")
print(offload_path)

# %%
build.check_build("04.build.act_offload", offload_path)

# %% tags=["nbval-ignore-output"]
# When your module passes: seconds per step and bytes written per step, yours beside plain autograd
# (times are shown, never checked).
# from labkit.practice.build import act_offload as build_offload
# build_offload.benchmark(offload_path)
