# %% [markdown]
# ## Build it yourself: a 1F1B pipeline over send/recv
#
# Write the executor that `Schedule1F1B` is: `schedule_1f1b` gives each rank's order, `run_1f1b` runs
# one stage's forwards and backwards with `dist.isend`/`dist.recv` between ranks. `build.check_build` runs
# it on **2 and then 4 real ranks** and checks the losses and the accumulated gradients against one process
# running the whole model, **measures** the activations alive on rank 0 (at most p micro-batches), and
# shows the measured bubble beside the schedule's (p-1)/(m+p-1). A deadlocked send order is stopped after
# its timeout and named, with where each rank waited.

# %%
onef1b_path = build.open_stub("02.build.onef1b")
print(onef1b_path)

# %%
build.check_build("02.build.onef1b", onef1b_path)
