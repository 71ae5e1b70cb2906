# %% [markdown]
# # 06 · Fault tolerance: real crashes, checkpoints that survive them, redundant computation
#
# **Why it matters.** A training job on thousands of GPUs is one program: when one GPU,
# link or host fails, the whole job stops. Meta's Llama 3 run saw 419 unexpected
# interruptions in 54 days on 16,384 GPUs, about one every three hours. Two answers exist.
# **Parameter checkpoints**: persist the training state, and after a failure restore it and
# redo the work since; costly to write, costly to read back. **Redundant computation**:
# compute (or hold) the same state on more than one GPU, so a neighbour takes over without a
# restart (Bamboo, NSDI 2023; Gemini's in-memory checkpoints, SOSP 2023).
#
# Below, processes are really killed with `SIGKILL`, checkpoints are real files written with
# `torch.distributed.checkpoint`, and corruptions are real damaged bytes. Figures at cluster
# scale come from labkit's formulas and simulator, fed with published failure rates.

# %%
import atexit
import shutil
import tempfile
from pathlib import Path

from labkit import checks, plots
from labkit.references import failure_traces
from labkit.resilience import corrupt, crash, failover, interval, redundancy
from labkit.resilience import exercises as _exercises  # noqa: F401  (registers the 06.* exercises)
from labkit.resilience.checkpoint import measure_save_stall
from labkit.resilience.worker import micro_config
from labkit.tables import text_table
from labkit.train import Trainer, seed_everything

seed_everything(0)
work = Path(tempfile.mkdtemp(prefix="labkit-06-"))
atexit.register(shutil.rmtree, work, True)  # no checkpoint left behind, even if a cell fails

# %% [markdown]
# ## 1 · How often does a big job fail?
#
# **Predict:** at the Llama 3 run's failure rate, how many unexpected interruptions a day
# does a job on 16,384 GPUs see? On 100,000 GPUs?

# %%
predicted_per_day_16k = None
predicted_per_day_100k = None

# %%
traces = {t.name: t for t in failure_traces()}
sizes = (1_024, 4_096, 16_384, 100_000)
for t in traces.values():
    print(f"{t.name}: {t.unexpected} unexpected interruptions in {t.days:g} days on {t.gpus:,} {t.gpu} "
          f"= {t.rate_per_gpu_day * 1e3:.3f} per 1,000 GPU-days ({t.source})")
llama = traces["Llama 3"]
for n in sizes:
    print(f"{n:>7,} GPUs: {llama.failures_per_day(n):6.2f} failures a day, one every {llama.mtbf_hours(n):5.2f} h")
print(checks.reveal_number(predicted_per_day_16k, llama.failures_per_day(16_384), "Per day on 16,384 GPUs", "", 1))
print(checks.reveal_number(predicted_per_day_100k, llama.failures_per_day(100_000), "Per day on 100,000 GPUs", "", 1))
plots.failures_per_day(sizes, {name: [t.failures_per_day(n) for n in sizes] for name, t in traces.items()})

# %% [markdown]
# ## 2 · Break it: kill a training run, for real
#
# A training run in a child process saves a checkpoint every 2 steps (model, optimizer,
# random-number state, data position) with `torch.distributed.checkpoint`, written to a
# temporary directory with a manifest of SHA-256 checksums, fsynced, then renamed into place.
# It is killed with `SIGKILL` at 10 random points, during steps and in the middle of writing
# a checkpoint, then started again on the same directory. **Predict:** does every resumed run
# end with *bit-identical* parameters to a run never killed? And what is the most steps a kill
# loses with a checkpoint every 2 steps?

# %%
predicted_identical = None  # True or False
predicted_most_lost = None  # steps

# %%
sweep = crash.kill_sweep(work / "kills", n=10, steps=8, every=2, seed=0)
print(sweep.table())
assert sweep.all_ok
most_lost = max(o.steps_lost for o in sweep.outcomes)
print(checks.reveal_claims({"bit-identical": predicted_identical}, {"bit-identical": sweep.all_ok}))
print(checks.reveal_number(predicted_most_lost, most_lost, "Most steps lost (measured)", "", 1))

# %% [markdown]
# A kill during a step loses the steps since the last checkpoint; a kill while *writing*
# loses more, because the half-written checkpoint is rejected (`rejected` = 1: its `.tmp`
# directory was never renamed into place, so the commit did not finish) and the run falls back
# to the one before. It never
# loads a half-written state. What the lost work and the restart cost in wall-clock time
# here (not checked):

# %% tags=["nbval-ignore-output"]
print(sweep.timing_table())

# %% [markdown]
# ## 3 · Checkpoints that are damaged
#
# Disks and networks corrupt data. Each kind of damage is done to the newer of two
# checkpoints; loading must notice and use the older one, with a message that says why.

# %%
for case in corrupt.corruption_report(work / "corrupt", micro_config()):
    print(f"{case.kind:17} step {case.damaged_step} detected: {'yes' if case.detected else 'NO'}; "
          f"used step {case.used_step}\n    {case.reason[:110]}")

# %% [markdown]
# Loading never runs code from the checkpoint: tensors are read with `weights_only=True`,
# and DCP's metadata (a pickle) through an allow-list unpickler that refuses anything but
# plain data.
#
# ## 4 · The cost of a checkpoint: synchronous against asynchronous
#
# A synchronous save stalls training for the whole write; `async_save` stalls only while it
# copies the state to host memory, then writes in the background (wall clock, not checked):

# %% tags=["nbval-ignore-output"]
stall_rows = []
for d_model in (32, 128, 256):
    st = measure_save_stall(Trainer(micro_config(d_model=d_model)), work / f"stall{d_model}")
    stall_rows.append([f"{st.state_bytes:,}", f"{1e3 * st.sync_s:.0f}", f"{1e3 * st.async_stall_s:.0f}",
                       f"{1e3 * st.async_total_s:.0f}"])
print(text_table(["state bytes", "sync stall, ms", "async stall, ms", "async total, ms"], stall_rows))

# %% [markdown]
# ## 5 · A whole group fails: kill one rank of two
#
# Data-parallel ranks wait on each other in every all-reduce: when one dies, the survivor's
# collective fails, the launcher stops the group, and the whole group restarts from the last
# checkpoint. Rank 1 of a 2-rank gloo group is killed during step 3:

# %%
group = crash.crash_group(work / "group", steps=6, every=2)
o = group.outcome
print(f"failed rank {group.failed_rank}, stopped cleanly (no hang): {group.failed_cleanly}")
print(f"resumed from step {o.resumed_from}, {o.steps_lost} step lost; both ranks bit-identical to a run "
      f"never killed: {o.params_identical and o.state_identical and o.losses_identical}")

# %% [markdown]
# Gemini (SOSP 2023) keeps checkpoints in the **CPU memory of a peer** instead of on remote
# storage: the network is faster than storage, and a restarted rank fetches its state back
# from the peer without touching a disk. Two ranks each hand a snapshot to the other; rank 1
# then loses everything it held and restarts from its peer's copy:

# %%
from labkit import dist
from labkit.resilience.peer import peer_worker

for r in dist.run(peer_worker, 2, steps=6, every=3, failed_rank=1):
    print(f"rank {r.rank}: snapshot of step {r.snapshot_step} ({r.state_bytes:,} B) held by rank {r.holds_copy_of}; "
          f"restored from {r.restored_from}: bit-identical {r.restored_bit_identical}, "
          f"replay identical {r.replay_bit_identical}")

# %% [markdown]
# ## 6 · Choosing the interval
#
# Checkpoint often and the writes eat the time; rarely, and each failure throws away more
# work. Young (1974): with checkpoint cost C and mean time between failures M, the best
# interval is τ = √(2CM); Daly (2006) refines it. Below, a job of 100 hours of work with
# M = 1 h, C = 36 s, restart R = 3 min is simulated 400 times for each interval, failures
# drawn from an exponential distribution (predicted by simulation, beside both formulas).
# **Predict:** the best interval, in minutes.

# %%
predicted_interval_min = None

# %%
M, C, R = 3600.0, 36.0, 180.0
sw = interval.sweep(100 * M, C, R, M, trials=400, seed=0)
print(sw.table())
print(f"Young {sw.young_s / 60:.1f} min, Daly {sw.daly_s / 60:.1f} min; "
      f"best simulated {sw.best_interval_s / 60:.1f} min")
print(checks.reveal_number(predicted_interval_min, sw.best_interval_s / 60, "Best interval (simulated)", "min", 1))
plots.line({"simulated": [p.goodput for p in sw.points], "Daly": [p.daly_goodput for p in sw.points]},
           "interval, minutes", "goodput (useful fraction of time)", "Goodput against checkpoint interval",
           x=[p.interval_s / 60 for p in sw.points])

# %% [markdown]
# Real failure logs are not exponential: failures cluster, and a Weibull with shape below 1
# fits them better (Schroeder and Gibson, DSN 2006). At the same mean, the best interval
# barely moves:

# %%
weib = interval.sweep(100 * M, C, R, M, trials=400, seed=0, distribution="weibull", shape=0.7)
print(f"Weibull k = 0.7: best simulated {weib.best_interval_s / 60:.1f} min, goodput at Young's "
      f"{next(p.goodput for p in weib.points if abs(p.interval_s - weib.young_s) < 1e-6):.4f}")

# %% [markdown]
# ## 7 · Scale: Llama 3 405B on growing clusters
#
# 405 B parameters, a checkpoint of 14 bytes per parameter (16-bit weights and fp32 optimizer
# states; gradients are recomputed), written by 128 model-parallel groups each to its own
# NVMe drive, the Llama 3 failure rate, 10 minutes to restart (predicted; the restart
# overhead is this lab's assumption):

# %%
rows = interval.cluster_intervals((1_024, 4_096, 16_384, 100_000), 405_000_000_000, writers=128)
print(interval.cluster_table(rows))

# %% [markdown]
# ## 8 · Redundant computation: a neighbour takes over
#
# Bamboo gives each pipeline stage its successor's layers too and runs their forward
# redundantly in the pipeline's bubbles; when a stage dies, its predecessor already holds its
# state and takes over without a restart, slower until the node is replaced. It can be free
# only when the bubble has room for the extra work (capacity >= 1), and even then not always:
# a redundant forward must wait for its input, so some land outside the idle slots (p=4, m=8
# below). Predicted by labkit's simulator, t_b = 2 t_f:

# %%
rc_rows = []
for p, m in ((4, 4), (4, 8), (4, 16), (8, 8)):
    rc = redundancy.rc_step("1f1b", p, m)
    eager = redundancy.rc_step("1f1b", p, m, placement="eager")
    rc_rows.append([f"p={p}, m={m}", f"{redundancy.bubble_capacity(p, m):.2f}", f"{100 * eager.overhead:.1f}%",
                    f"{100 * rc.overhead:.1f}%"])
print(text_table(["1F1B pipeline", "bubble / RC work", "RC eager", "RC in bubbles"], rc_rows))
plots.gantt(redundancy.rc_step("1f1b", 4, 8).timeline, title="1F1B, p=4, m=8, with redundant forwards (simulated)")

# %% [markdown]
# Now for real: a 2-stage pipeline on 2 gloo ranks, each rank also computing the other's
# stage (with 2 stages, the successor is also the predecessor). Rank 1 is killed with
# `SIGKILL` in step 3. **Predict:** how many steps does the survivor lose?

# %%
predicted_rc_lost = None

# %%
fo = failover.run_failover(steps=6, kill_step=3, kill_rank=1)
print(f"exit codes {fo.exit_codes} (-9 = SIGKILL); survivor rank {fo.survivor} took over at step {fo.failed_at}")
print(f"replica held {fo.replica_bytes:,} B = 12 B x {fo.replica_params:,} parameters "
      f"(predicted {fo.predicted_replica_bytes:,}); no checkpoint was read")
print(f"losses and parameters bit-identical to an uninterrupted run: {fo.losses_identical and fo.params_identical}")
print(checks.reveal_number(predicted_rc_lost, fo.steps_lost, "Steps lost (measured)", "", 1))

# %% [markdown]
# ## 9 · Design: which strategy for which cluster?
#
# Cluster size, failure rate (a published trace or your own), checkpoint size, storage and
# network bandwidth, and the strategy: checkpoint-restart to storage, an in-memory checkpoint
# in a peer's DRAM (Gemini), or redundant computation (Bamboo). Goodput, lost GPU-hours a day
# and the best interval (predicted). Find the cluster size at which checkpoint-restart to
# 100 GB/s storage drops below 90% goodput.

# %% tags=["nbval-ignore-output"]
from labkit.resilience.panel import ResiliencePanel

ResiliencePanel()

# %% [markdown]
# ## 10 · Check yourself

# %%
checks.check("06.young_minutes", None)

# %%
checks.check("06.failures_per_day", None)

# %%
checks.check("06.lost_minutes", None)

# %%
checks.check("06.checkpoint_tb", None)

# %%
shutil.rmtree(work)  # the lab leaves no checkpoint behind
