# %% [markdown]
# # 06 · Fault tolerance: real crashes, checkpoints that survive them, redundant computation
#
# **Why it matters.** A training job on thousands of GPUs is one program: when one GPU,
# link or host fails, the whole job stops, and the more GPUs, the more often it stops: section 1
# asks how often, at the rate Meta's Llama 3 run saw. Two answers exist.
# **Parameter checkpoints**: persist the training state, and after a failure restore it and
# redo the work since; costly to write, costly to read back. **Redundant computation**:
# compute (or hold) the same state on more than one GPU, so a neighbour takes over without a
# restart (Bamboo, NSDI 2023; Gemini's in-memory checkpoints, SOSP 2023).
#
# Below, processes are really killed with `SIGKILL`, checkpoints are real files written with
# `torch.distributed.checkpoint`, and corruptions are real damaged bytes. Figures at cluster
# scale come from labkit's formulas and simulator, fed with published failure rates.
# Symbols: p is the number of pipeline stages, m the micro-batches per step (notebook 00's table
# lists every symbol of the lab).

# %%
import atexit
import shutil
import tempfile
from pathlib import Path

from labkit.predict.tables import text_table
from labkit.references import failure_traces
from labkit.resilience import cluster, corrupt, crash, failover, redundancy, save_cost, sweep, trends
from labkit.resilience import exercises as _exercises  # noqa: F401  (registers the 06.* exercises)
from labkit.resilience.worker import micro_config
from labkit.rig.train import seed_everything
from labkit.teach import checks, plots

seed_everything(0)
work = Path(tempfile.mkdtemp(prefix="labkit-06-"))
cleanup = atexit.register(shutil.rmtree, work, True)  # no checkpoint left behind, even if a cell fails

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
llama = traces["Llama 3"]
print(checks.reveal_number(predicted_per_day_16k, llama.failures_per_day(16_384), "Per day on 16,384 GPUs", "", 1,
                           key="06.predict.per_day_16k"))  # an empirical rate: judged within a band
print(checks.reveal_number(predicted_per_day_100k, llama.failures_per_day(100_000), "Per day on 100,000 GPUs", "", 1,
                           key="06.predict.per_day_100k"))

# %%
for t in traces.values():
    print(f"{t.name}: {t.unexpected} unexpected interruptions in {t.days:g} days on {t.gpus:,} {t.gpu} "
          f"= {t.rate_per_gpu_day * 1e3:.3f} per 1,000 GPU-days ({t.source})")
    if t.note:
        print(f"    reconstructed by this lab, not a count the source prints: {t.note}")
for n in sizes:
    print(f"{n:>7,} GPUs: {llama.failures_per_day(n):6.2f} failures a day, one every {llama.mtbf_hours(n):5.2f} h")
plots.failures_per_day(sizes, {name: [t.failures_per_day(n) for n in sizes] for name, t in traces.items()})

# %% [markdown]
# The Llama 3 figures are the paper's own counts. The OPT-175B line is a reconstruction: its
# logbook describes the restarts in words, and the lab turned them into a count and a
# duration (the indented line says how), so read its rate as an estimate.
#
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
kills = crash.kill_sweep(work / "kills", n=10, steps=8, every=2, seed=0)
assert kills.all_ok
most_lost = max(o.steps_lost for o in kills.outcomes)
print(checks.reveal_claims({"bit-identical": predicted_identical}, {"bit-identical": kills.all_ok},
                           key="06.predict.bit_identical"))
print(checks.reveal_number(predicted_most_lost, most_lost, "Most steps lost (measured)", "", 1,
                           key="06.predict.most_lost"))

# %%
print(kills.table())
kill_claims = trends.kills(kills, every=2)  # what the text below claims of this table
for claim, held in kill_claims.items():
    print(f"{claim}: {'yes' if held else 'NO'}")
assert all(kill_claims.values()), kill_claims

# %% [markdown]
# A kill during a step loses the steps since the last checkpoint; a kill while *writing*
# loses more, because the half-written checkpoint is rejected (`rejected` = 1: its `.tmp`
# directory was never renamed into place, so the commit did not finish) and the run falls back
# to the one before. It never
# loads a half-written state (the claims under the table are asserted). What the lost work
# and the restart cost in wall-clock time here (not checked). *Lost work* runs from the
# checkpoint the run resumed from to the kill, so it counts the part of a step done when the
# kill came: a row with 0 steps lost still shows some milliseconds. *Restart* runs from the
# kill to the new process having loaded its checkpoint: tens of milliseconds for this tiny
# model on a local disk, where section 7 assumes 10 minutes for a cluster job. Each row is one
# run, so on a busy machine (other processes on the same cores) either column can read two or
# three times its quiet value, row by row; the lesson is in the steps-lost table above.

# %% tags=["nbval-ignore-output"]
print(kills.timing_table())

# %% [markdown]
# ## 3 · Checkpoints that are damaged
#
# Disks and networks corrupt data. Each kind of damage is done to the newer of two
# checkpoints; loading must notice and use the older one, with a message that says why.

# %%
for case in corrupt.corruption_report(work / "corrupt", micro_config()):
    print(f"{case.kind:17} step {case.damaged_step} detected: {'yes' if case.detected else 'NO'}; "
          f"used step {case.used_step}")
    print("\n".join(f"    {line}" for line in case.reason_lines()))

# %% [markdown]
# Loading never runs code from the checkpoint: labkit reads only JSON (the manifest, with
# DCP's index copied into it) and tensors with `weights_only=True`; DCP's own pickled index
# is never opened. The checksums catch damage, not an attacker: anyone who can write the
# folder can write a matching manifest, so a folder others can write is untrusted input.
#
# ## 4 · The cost of a checkpoint: synchronous against asynchronous
#
# A synchronous save stalls training for the whole write: DCP writes the files with fsync, and
# the manifest hashes them. `async_save` stalls only while it copies the state into host
# memory, then writes in the background. So the prediction is bytes over bandwidth: B/write +
# B/hash for the sync stall, B/copy for the async one, with the three bandwidths measured
# first on this machine with plain tools (a file written and fsynced, `hashlib`, a tensor
# clone; the median of three rounds each). States from about 0.1 to 100 MB, the median of
# three saves each (wall clock, not checked digit by digit; the claims below are asserted
# under the table, and hold with other processes competing for the cores, where every
# figure can read up to several times its quiet value):

# %% tags=["nbval-ignore-output"]
bandwidths, costs = save_cost.save_costs(work / "cost")
print(save_cost.save_cost_text(bandwidths, costs))

# %%
cost_claims = trends.save_cost(costs)  # what the text below claims of that table
for claim, held in cost_claims.items():
    print(f"{claim}: {'yes' if held else 'NO'}")
assert all(cost_claims.values()), cost_claims

# %% [markdown]
# Read the two regimes. The smallest states still cost milliseconds however few their bytes
# (creating files, DCP's planning, the manifest, the renames and their fsyncs): a fixed cost
# that bytes over bandwidth leaves out, so there the prediction is far below the measurement.
# From tens of MB the stall grows with the bytes, and bytes over bandwidth gives its scale; a
# shared disk's bandwidth changes from moment to moment, so one run can sit well above or
# below it. The async stall is a copy in host memory, with no fsync and no hash: one term,
# B/copy, where the sync stall has two, so its prediction is the shorter of the two from a few MB
# up (each figure is the
# median of three saves, because one sample on a few shared cores can catch the copy behind
# another process and show the opposite);
# the write still happens in the background (`async total`), and it has to finish
# before the next checkpoint starts.

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
# M = 1 h, C = 36 s, restart R = 3 min, failures drawn from an exponential distribution, is
# simulated at every whole minute from 1 to 30 (a grid chosen without either formula), with
# 5 seeds of 80 jobs each, so each point has a mean and a spread across seeds (predicted by
# simulation, beside both formulas). **Predict:** the best interval, in minutes. Then see how
# much goodput checkpointing twice as often as Young's interval loses.

# %%
predicted_interval_min = None

# %%
M, C, R = 3600.0, 36.0, 180.0
sw = sweep.sweep(100 * M, C, R, M, sweep.minute_grid(1, 30), seeds=5, trials=80)
assert all(abs(p.goodput - p.daly_goodput) < 0.01 for p in sw.points)  # simulated = Daly's model
(lo, hi), (lo1, hi1) = sw.plateau(), sw.within(0.01)
print(checks.reveal_number(predicted_interval_min, sw.best.interval_s / 60, "Best interval (simulated)", "min", 1,
                           key="06.predict.best_interval"))

# %%
print(sw.table())
print(f"Young {sw.young_s / 60:.1f} min, Daly {sw.daly_s / 60:.1f} min; best simulated "
      f"{sw.best.interval_s / 60:.0f} min ({sw.best.goodput:.4f} ± {sw.best.spread:.4f})")
print(f"within 2 sd of the best: {lo / 60:.0f} to {hi / 60:.0f} min; within 1 point (0.01) of the best goodput: "
      f"{lo1 / 60:.0f} to {hi1 / 60:.0f} min")
print(f"simulated goodput at Young's interval {sw.goodput_at(sw.young_s):.4f}, at half of it "
      f"{sw.goodput_at(sw.young_s / 2):.4f}, at twice it {sw.goodput_at(2 * sw.young_s):.4f}")
sweep.sweep_figure(sw)

# %% [markdown]
# The real lesson is the flat top, not the exact minute. Waste is C/τ + τ/2M to first order,
# whose minimum is quadratic: near the optimum a band of intervals gives goodput the seeds
# cannot tell apart from the best (the shaded band of the figure), a wider one stays within
# one point of goodput (both printed above), and Young's and Daly's formulas land inside.
# Erring by a factor of two either way costs a few points (printed above); the ends of the
# grid cost far more. So the formula is a good default, and a rough estimate of C and M is
# enough: the best simulated minute is not a finding in itself.
#
# Real failure logs are not exponential: failures cluster, and a Weibull with shape below 1
# fits them better (Schroeder and Gibson, DSN 2006). The same sweep at the same mean time
# between failures:

# %%
weib = sweep.sweep(100 * M, C, R, M, sweep.minute_grid(1, 30), seeds=5, trials=80, distribution="weibull", shape=0.7)
(wlo, whi) = weib.plateau()
interval_claims = trends.interval(sw, weib)  # what the text above and below claims of the two sweeps
print(f"Weibull k = 0.7: best simulated {weib.best.interval_s / 60:.0f} min ({weib.best.goodput:.4f} ± "
      f"{weib.best.spread:.4f}), within 2 sd of it {wlo / 60:.0f} to {whi / 60:.0f} min; goodput at Young's "
      f"{weib.goodput_at(weib.young_s):.4f} (exponential: {sw.goodput_at(sw.young_s):.4f})")
for claim, held in interval_claims.items():
    print(f"{claim}: {'yes' if held else 'NO'}")
assert all(interval_claims.values()), interval_claims

# %% [markdown]
# Daly's model assumes exponential gaps, so it is no longer the prediction here; compare the
# simulated goodput of the two distributions above: at the same mean time between failures,
# the clustered (Weibull) failures leave the higher goodput. Clustered failures strike several
# times within one interval more often, each losing only a little work, and leave long quiet
# stretches between clusters.

# %% [markdown]
# ## 7 · Scale: Llama 3 405B on growing clusters
#
# 405 bn parameters, a checkpoint of 14 bytes per parameter: 2 of bf16 weights and 12 of fp32
# optimizer states (master weights and Adam's two moments). ZeRO's 16 bytes per parameter also
# count 2 of bf16 gradients, which are not saved: the next step computes them afresh. Llama 3
# shards its optimizer states across the data-parallel ranks (Llama 3 paper, section 3.3.2),
# so its data-parallel replicas do
# **not** hold identical full state: each rank holds a slice of the optimizer states that no
# other rank has, and every rank has its own slice to save. The bytes to save are the same
# 14 per parameter however they are split; the split only decides how many write paths
# share them, and those paths end in node drives and shared storage whose bandwidth does not
# grow with every GPU added. This lab therefore fixes the write bandwidth instead of dividing
# by the cluster size: 128 parallel writers (as many as the ranks of one TP 8 × PP 16
# model-parallel group), each writing to its own node's NVMe drive. C below is the cost at
# that assumed bandwidth, not a figure Llama 3 reports. The Llama 3 failure rate, 10 minutes
# to restart (predicted; the restart overhead is also this lab's assumption). R, the time a
# failure costs before work resumes, is those 600 s plus reading the checkpoint back, which is
# why it prints a few seconds above 600:

# %%
sizes, params = (1_024, 4_096, 16_384, 100_000), 405_000_000_000
print(cluster.cluster_table(cluster.cluster_intervals(sizes, params, writers=128)))

# %% [markdown]
# A checkpoint on a node's own NVMe drive does **not** survive the loss of that node, and a
# failed node is exactly when the checkpoint is needed: that node's shards are gone with it.
# A usable plan copies each shard off the node, to a peer's memory (Gemini) or to remote
# storage, and the bandwidth of that copy sets C. The same job with each of the 128 writers
# sending its shard over its own InfiniBand NDR link (the catalogue's bandwidth) into the host memory of
# a peer on another node, as Gemini does:

# %%
peer = cluster.cluster_intervals(sizes, params, writers=128, target="peer", device="ib-ndr")
print(cluster.cluster_table(peer))
plan_claims = trends.plans(cluster.cluster_intervals(sizes, params, writers=128), peer)  # the text below
for claim, held in plan_claims.items():
    print(f"{claim}: {'yes' if held else 'NO'}")
assert all(plan_claims.values()), plan_claims

# %% [markdown]
# Here the network copy is also faster than the local drive, so C shrinks and goodput rises;
# the restart, dominated by the assumed 10 minutes, hardly changes. At 100,000 GPUs neither
# plan keeps goodput high: failures come about every half hour (the MTBF column) and each
# costs a restart.

# %% [markdown]
# ## 8 · Redundant computation: a neighbour takes over
#
# Bamboo gives each pipeline stage its successor's layers too and runs their forward
# redundantly in the pipeline's bubbles; when a stage dies, its predecessor already holds its
# state and takes over without a restart, slower until the node is replaced. It can be free
# only when the bubble has room for the extra work (capacity >= 1), and even then not always:
# a redundant forward must wait for its input, so some land outside the idle slots (p=4, m=8
# below). Predicted by labkit's simulator, a backward taking twice a forward (t_b = 2 t_f, t_f
# and t_b the times of one micro-batch's forward and backward on one stage). *Bubble / RC work*
# is the idle time per rank over the redundant forwards it must fit, (p-1)(t_f+t_b) / (m t_f);
# *RC eager* runs each redundant forward right after the rank's own forward of that micro-batch,
# *RC in bubbles* fits each into an idle gap, once its input is ready, where it delays nothing
# and runs the rest after the rank's last action; both are the extra step time over the plain
# pipeline's (the claims under the table are asserted):

# %%
rc_rows, rc_cases = [], {}
for p, m in ((4, 4), (4, 8), (4, 16), (8, 8)):
    rc = redundancy.rc_step("1f1b", p, m)
    eager = redundancy.rc_step("1f1b", p, m, placement="eager")
    rc_cases[p, m] = (redundancy.bubble_capacity(p, m), eager.overhead, rc.overhead)
    rc_rows.append([f"p={p}, m={m}", f"{rc_cases[p, m][0]:.2f}", f"{100 * eager.overhead:.1f}%",
                    f"{100 * rc.overhead:.1f}%"])
print(text_table(["1F1B pipeline", "bubble / RC work", "RC eager", "RC in bubbles"], rc_rows))
rc_claims = trends.redundancy(rc_cases)  # what the text above claims of the table
for claim, held in rc_claims.items():
    print(f"{claim}: {'yes' if held else 'NO'}")
assert all(rc_claims.values()), rc_claims
plots.gantt(redundancy.rc_step("1f1b", 4, 8).timeline, title="1F1B, p=4, m=8, with redundant forwards (simulated)")

# %% [markdown]
# Now for real: a 2-stage pipeline on 2 gloo ranks, each rank also computing the other's
# stage (with 2 stages, the successor is also the predecessor). Rank 1 is killed with
# `SIGKILL` in step 3. **Predict:** how many steps does the survivor lose?

# %%
predicted_rc_lost = None

# %%
fo = failover.run_failover(steps=6, kill_step=3, kill_rank=1)
assert fo.replica_bytes == fo.predicted_replica_bytes  # measured = model
print(checks.reveal_number(predicted_rc_lost, fo.steps_lost, "Steps lost (measured)", "", 1, key="06.predict.rc_lost"))

# %%
print(f"exit codes {fo.exit_codes} (-9 = SIGKILL); survivor rank {fo.survivor} took over at step {fo.failed_at}")
print(f"replica held {fo.replica_bytes:,} B = 12 B (fp32 weight and AdamW's two fp32 moments) x "
      f"{fo.replica_params:,} parameters (predicted {fo.predicted_replica_bytes:,}); no checkpoint was read")
print(f"losses and parameters bit-identical to an uninterrupted run: {fo.losses_identical and fo.params_identical}")

# %% [markdown]
# ## 9 · Design: which strategy for which cluster?
#
# Cluster size, failure rate (a published trace or your own), checkpoint size, storage and
# network bandwidth, and the strategy: checkpoint-restart to storage, an in-memory checkpoint
# in a peer's DRAM (Gemini), or redundant computation (Bamboo). Goodput, lost GPU-hours a day
# and the best interval (predicted; GB = 1e9 bytes). Find the cluster size at which
# checkpoint-restart to 100 GB/s storage drops below 90% goodput. That is the checked task
# below (to within 1,024 GPUs, with the panel's Llama 3 failure rate, checkpoint and restart
# time): set the GPUs, then press "Check my design"; it says whether to go up or down. Then
# try the other strategies at that size.

# %% tags=["nbval-ignore-output"]
from labkit.practice import design as design_tasks  # noqa: E402
from labkit.resilience.panel import ResiliencePanel

resilience_panel = ResiliencePanel()
resilience_panel.set_task(design_tasks.task("06"))

# %% [markdown]
# ## Build it yourself: a sharded checkpoint that survives a SIGKILL
#
# Write `save_sharded(state, folder, step)`, called on every rank of a real process group: each rank writes
# its own shard with `torch.save`, and rank 0 commits a manifest that makes the checkpoint visible. Then
# `load_sharded(folder, rank)`, which returns the newest complete checkpoint's step and that rank's state.
# `build.open_stub` copies a stub to `build/sharded_ckpt.py` beside this notebook (once).
#
# `build.check_build` runs your module on **2 and 4 real ranks** (gloo), only ever in child processes: a round
# trip (bit for bit, one shard file per rank), the calls your save makes (fsync before every rename, the
# manifest committed after the shards and after a collective), real `SIGKILL`s half-way through a rank's shard
# (both ranks must then load one whole checkpoint, old or new), and a shard replaced by a pickle that would run
# code (it must be refused: `weights_only=True`). Each bug is named in the feedback. Below it runs on the blank
# stub.

# %%
from labkit.practice import build

ckpt_path = build.open_stub("06.build.sharded_ckpt")
print(ckpt_path)

# %%
build.check_build("06.build.sharded_ckpt", ckpt_path)

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

# %% [markdown]
# **Reasoning across results.** Put two results together: how the failure rate grows with
# the number of GPUs (section 1: at a fixed rate per GPU-day, failures a day grow in
# proportion to the GPUs, so the cluster's MTBF M falls in inverse proportion) and Young's
# interval √(2CM) of section 6. Answer as a factor (new interval / old interval).

# %%
from labkit.practice import reasoning  # noqa: E402, F401 - importing it registers the reasoning exercises

checks.check("06.reason.young_factor", None)

# %% [markdown]
# **Coding exercise.** Write the checkpoint writer of section 2 yourself: `save(state, path)`
# stores a dict of tensors so that a crash at any moment leaves `path` loadable. The check
# writes a good checkpoint, then forks a process that saves a newer, larger state to the
# same path with your function and kills it with a real `SIGKILL` as soon as bytes reach the
# disk: afterwards `path` must load with `torch.load(path, weights_only=True)` and hold the
# old checkpoint or the new one, never a torn mix. It also checks that a completed save
# really replaces the old checkpoint, and that the new bytes are flushed to disk before they
# replace it: a case no kill can test, since a killed process's pages still reach the disk.

# %%
import os  # noqa: E402, F401 - for your code

import torch  # noqa: E402, F401 - for your code

from labkit import practice  # noqa: E402


def save(state, path):
    raise NotImplementedError  # your code here


practice.check_code("06.code.atomic_save", save)

# %%
shutil.rmtree(work)  # the lab leaves no checkpoint behind

# %% [markdown]
# **Handing in.** Every answer, committed prediction and check result is appended as you go to
# `labkit-journal.jsonl` beside this notebook, so a kernel restart loses nothing. To hand them in,
# run `checks.export_answers("answers-06.json", student="your name", notebook="06")` in a new
# cell: it writes every try in order with its verdict, and a summary scored by your committed guesses.
