# %% [markdown]
# # 02 · Inter-layer parallelism: ZeRO data parallelism, GPipe and PipeDream
#
# **Why it matters.** Notebook 01 showed that a 7B model's *model states* (16 bytes per
# parameter with mixed-precision Adam) are several times a 24 GB card before a single
# activation is stored. Plain data parallelism does not help: every GPU keeps a full
# copy. Two families of techniques split the model *between* GPUs instead:
#
# * **ZeRO** (Rajbhandari et al., SC 2020) keeps data parallelism but partitions the
#   optimizer states (stage 1), then the gradients (stage 2), then the parameters
#   (stage 3) across the N data-parallel ranks (ZeRO's N_d), and moves each piece on demand;
# * **pipelines** cut the layers into p stages on p GPUs and pass activations between
#   them: GPipe (Huang et al., 2019) runs all m micro-batches forward, then backward;
#   1F1B (PipeDream-Flush, Narayanan et al., ICML 2021, after PipeDream, SOSP 2019)
#   alternates them so that fewer micro-batches are in flight (section 4 asks how many).
#   Both leave GPUs idle at the start and end of a step:
#   the **bubble**, (p-1)/(m+p-1) of the time.
#
# Below, every strategy runs **for real** on this CPU with `torch.distributed` (gloo,
# 2 to 4 local processes on 127.0.0.1); the bytes each rank holds and sends are
# **measured** and put beside the formulas (**predicted** by `labkit`). The picture:
# ZeRO's own example, 7.5 bn parameters on 64 GPUs (predicted).

# %%
from labkit import dist, hardware, sim
from labkit.inter_layer import bubble, pipedream, pipedream_runs, pipeline, report, scale, zero
from labkit.inter_layer import exercises as _exercises  # noqa: F401  (registers the 02.* exercises)
from labkit.inter_layer.panel import PipelinePanel
from labkit.predict import tables
from labkit.predict.estimate import TrainingSetup, model_state_bytes
from labkit.shapes import model_shape
from labkit.teach import checks, plots

stages = {f"stage {z}" if z else "data parallel": model_state_bytes(7_500_000_000, "bf16-mixed", z, 64)
          for z in range(4)}
plots.memory_bars(stages, title="7.5 bn parameters, 64 GPUs: model states per GPU (predicted)")

# %% [markdown]
# ## 1 · Predict
#
# The tiny GPT trains data-parallel in fp32 with AdamW: 4 bytes of weights, 4 of
# gradients and 8 of Adam's two moments per parameter. **Under ZeRO stage 3 with 4
# ranks, what share of the data-parallel bytes does each rank keep?** And **how many
# times as many elements per step does stage 3 send as plain data parallelism?** Commit your
# answers first.

# %%
predicted_share_stage3 = None  # a fraction, e.g. 0.5
predicted_extra_traffic = None  # a factor, e.g. 2.0

# %% [markdown]
# ## 2 · Measure: DDP and ZeRO stages 1-3 on real process groups
#
# Four strategies train the same tiny GPT on the same data, each on 2 local ranks
# (gloo on 127.0.0.1; each rank takes half of every global batch):
#
# * `ddp`: torch's `DistributedDataParallel` (all-reduce of the gradients);
# * `zero1`: torch's `ZeroRedundancyOptimizer` (optimizer states sharded);
# * `zero2`: gradients and optimizer states sharded, full parameters kept (written in
#   labkit: FSDP2 shards parameters at rest, so it is not stage 2);
# * `zero3`: FSDP2 `fully_shard` on every block and the root (parameters too).
#
# After the last step each rank counts, storage by storage, the bytes it keeps (B), and
# every collective of a step is counted as it is issued (elements per call; an element
# here is one fp32 value, 4 B). The runs judge your two guesses first; their table (its `unit`
# column says which is which) follows in section 3, so nothing on screen answers them before.

# %%
results = zero.run_strategies(world_size=2, steps=5)
results4 = zero.run_strategies(("zero3",), world_size=4, steps=3)
share = sum(results4["zero3"][0].held.values()) / sum(results["ddp"][0].held.values())
print(checks.reveal_number(predicted_share_stage3, share, "Share of DDP's bytes per rank under zero3, 4 ranks",
                           "", 1.0, key="02.predict.zero3_share"))
extra = zero.volume(results["zero3"][0].steady) / zero.volume(results["ddp"][0].steady)
print(checks.reveal_number(predicted_extra_traffic, extra, "zero3 traffic / DDP traffic (measured)", "x", 1.0,
                           key="02.predict.zero3_traffic"))

# %% [markdown]
# ## 3 · Explain: the ZeRO formulas beside the measurement
#
# The `predicted` column is ZeRO's model (Rajbhandari et al., SC 2020) for fp32 AdamW,
# laid out as torch's engines lay it out, for Ψ parameters (ZeRO's letter for the parameter count)
# on N ranks: stage 1 keeps 4Ψ + 4Ψ + 8Ψ/N bytes per rank,
# stage 2 4Ψ + (4+8)Ψ/N, stage 3 16Ψ/N. Communication counts an all-reduce of n
# elements as 2n (a reduce-scatter then an all-gather); the paper's 2Ψ per step for
# data parallelism and stages 1-2, and 3Ψ for stage 3, is in the last column. The
# `assert` fails if any rank of any strategy differs from the model by one byte.

# %%
assert report.worst_zero_error(results) == 0 and report.worst_zero_error(results4) == 0
print(f"Psi = {results['ddp'][0].params:,} parameters; fp32 AdamW: 4 + 4 + 8 bytes per parameter")
print(report.zero_table(results))
print(f"zero3 on 4 ranks keeps {share:.2f} of DDP's bytes per rank (measured)")

# %% [markdown]
# Two things the paper does not say, measured here:
#
# * torch's `ZeroRedundancyOptimizer` keeps DDP's full all-reduce and then
#   **broadcasts** every updated parameter from the rank that owns it: 3Ψ per step,
#   not the paper's 2Ψ (the `comm broadcast` row);
# * gloo has no true reduce-scatter: it all-reduces the whole tensor and keeps its
#   chunk, so on this CPU backend a reduce-scatter of n moves 2n (NCCL on GPUs moves n).
#   The table counts every collective as NCCL would move it, so this does not show there.
#
# And the point of it all: every strategy computes **the same training**. The loss of
# each, step by step, beside single-process training on the full batch:

# %%
reference = zero.single_process_losses(steps=5)
curves = {"one process": reference} | {s: r[0].losses for s, r in results.items()}
for label, losses in curves.items():
    print(f"{label:12}", " ".join(f"{x:.4f}" for x in losses))
worst = max(abs(a - b) / b for r in results.values() for a, b in zip(r[0].losses, reference, strict=True))
assert worst < 1e-4
print("every strategy's loss is within 1e-4 (relative) of one process at every step: float rounding only")

# %% [markdown]
# ## 4 · Pipelines: GPipe, 1F1B and interleaved 1F1B with torch.distributed.pipelining
#
# Now the layers are cut instead: 4 transformer blocks in p stages, each stage on its
# own rank, m micro-batches per step. **Predict:** with p = 4 and m = 8, how many
# micro-batches of activations does rank 0 hold at its peak under GPipe, and under 1F1B?

# %%
predicted_gpipe_peak = None  # micro-batches
predicted_1f1b_peak = None  # micro-batches

# %% [markdown]
# The runs (measured): torch's schedules execute the steps; labkit times every forward
# and backward of every stage and counts the bytes autograd keeps alive on each rank.

# %%
runs2 = pipeline.run_pipelines(2, [pipeline.PipelineConfig("gpipe", 4), pipeline.PipelineConfig("1f1b", 4),
                                   pipeline.PipelineConfig("interleaved", 4, v=2), pipeline.PipelineConfig("gpipe", 1),
                                   pipeline.PipelineConfig("gpipe", 8)])
runs4 = pipeline.run_pipelines(4, [pipeline.PipelineConfig("gpipe", 8), pipeline.PipelineConfig("1f1b", 8)])
runs = {"GPipe p=2 m=4": runs2[0], "1F1B p=2 m=4": runs2[1], "interleaved p=2 v=2 m=4": runs2[2],
        "GPipe p=2 m=1": runs2[3], "GPipe p=2 m=8": runs2[4], "GPipe p=4 m=8": runs4[0], "1F1B p=4 m=8": runs4[1]}
print(checks.reveal_number(predicted_gpipe_peak, runs["GPipe p=4 m=8"].peak_microbatches[0],
                           "GPipe, rank 0 (measured)", "micro-batches", 1.0, key="02.predict.gpipe_peak",
                           mistakes={"1F1B's bound, p: GPipe runs every forward before any backward": 4,
                                     "one at a time: GPipe keeps each forward's activations until its backward": 1}))
print(checks.reveal_number(predicted_1f1b_peak, runs["1F1B p=4 m=8"].peak_microbatches[0],
                           "1F1B, rank 0 (measured)", "micro-batches", 1.0, key="02.predict.one_f_one_b_peak",
                           mistakes={"GPipe's m: 1F1B starts a backward once p - rank forwards are in flight": 8,
                                     "one: rank 0's first backward comes back only after p forwards": 1}))

# %%
print(report.pipeline_table(runs))

# %% [markdown]
# GPipe keeps every micro-batch's activations until its backward: m of them. 1F1B
# starts backwards as soon as the last stage can, so rank r holds p - r (Narayanan et
# al., SC 2021). Interleaving (v chunks per rank) shrinks the bubble and holds more
# activations: compare its row with 1F1B's at the same p and m. The schedules are the same
# programs: the order each rank ran its actions equals the order `labkit.sim` predicts.

# %%
for label, run in runs.items():
    assert run.orders == sim.schedule(run.config.kind, run.p, run.config.m, run.config.v), label
    assert all(abs(a - b) < 0.01 * b for a, b in zip(run.peak_microbatches, run.predicted_microbatches, strict=True))
print("rank 0, 1F1B p=4 m=8:", " ".join(str(a) for a in runs["1F1B p=4 m=8"].orders[0]))
reference = pipeline.single_process_losses(steps=2)
assert all(abs(a - b) < 1e-5 * abs(b) for run in runs.values() for a, b in zip(run.losses, reference, strict=True))
print("every pipeline's losses equal one process's within 1e-5 (relative)")

# %% [markdown]
# ### The bubble: formula, simulation and measurement
#
# The formula (p-1)/(v·m+p-1) assumes equal stages and free messages. `labkit.sim`
# replays a schedule action by action; with equal stages (backward = 2 × forward) it
# gives (deterministic, not timed):

# %%
cases = [(kind, 2, m, v) for kind, m, v in bubble.CASES]
print(report.bubble_formula_table(cases))

# %% [markdown]
# With equal stages the simulated schedules have exactly the formula's bubble.
#
# Timing the runs above would say little: a stage of the tiny GPT computes for about as
# long as one message and Python's bookkeeping take. So a wider GPT (`bubble.MODEL`,
# below) trains on **2 ranks** of one thread each, so that each can have a core of its own
# (more ranks than the machine has cores could never all run at once), with actions longer
# than the tiny GPT's (the `one action` column: a forward or backward's mean, median over the steps).
# Each schedule runs 4 steps in one process group; the first warms up, the other 3 are repeats.
# Then each rank times each of its stages alone, one forward and one backward on one
# micro-batch, in rounds (rank 0, then rank 1, then again: never both at once), in CPU seconds,
# which leave out the time another process held the core. Three figures per schedule:
#
# * **formula**: (p-1)/(v·m+p-1);
# * **replayed**: the schedule replayed by `labkit.sim.replay_schedule` with each stage's
#   forward and backward at its fastest round: this CPU's compute, uneven stages included
#   (the first stage also embeds, the last also computes the loss), with no messages and no
#   gaps; in brackets the range of the replays of the single rounds. GPipe and 1F1B at the
#   same m are replayed with the same stage times;
# * **measured**: 1 - busy/(p · span) of the real step, median and (min-max) over the repeats.
#
# What you will see, on a quiet machine or a busy one: the replayed column follows the
# formula within a few points (off it by as much as the stages are uneven), falls as m
# grows, puts interleaving below 1F1B, and GPipe and 1F1B at the same m within 2 points of
# each other; the cell after the table asserts these. The measured column sits well above
# both and moves from run to run (why, below the table). Wall-clock on a shared CPU: nbval
# does not check these figures.

# %% tags=["nbval-ignore-output"]
print("model:", bubble.MODEL, "batch", bubble.BATCH)
bubbles = bubble.measure(p=2, repeats=3)
print(bubble.table(bubbles))

# %%
trends = bubble.trends(bubbles)  # the replayed column: what the text above claims
for claim, held in trends.items():
    print(f"{claim}: {'yes' if held else 'NO'}")
assert all(trends.values()), trends

# %% [markdown]
# How to read it. The formula assumes equal stages and free messages. The replayed
# column is the schedule's own bubble with this CPU's stage costs: the stages are not quite
# equal, so it differs from the formula by as much as they differ: mostly above it (a stage
# slower than the others makes the rest wait), and for interleaving now and then a point below.
# Replaying each step's own
# action times instead would let any action that another process slowed (a wall-clock
# figure) show as a bubble the schedule does not have: on a busy machine that inverted the
# trends. The measured column is the real step: time no stage computed, which neither the
# formula nor the replay counts (messages, Python and gloo between actions, and the other
# processes on this machine's cores), comes on top. It changes from run to run, and on a busy
# machine it can hide the formula's trend altogether: compare the formula with the replayed
# column, not with the measured one. In the measured column interleaving tends to lose
# its edge over 1F1B, and can fall behind it: with v = 2 each rank runs twice as many actions,
# each about half as long (the `one action` column), and sends twice as many messages, so the
# fixed cost between actions, which neither the formula nor the replay counts, is a larger share
# of its step.
# That is the price section 6 names for GPUs too (v times as many sends), here made large
# by a CPU's slow messages. How much of the measured bubble is such overhead? Replay each
# step with its own measured action times (same order, same durations, no gaps): every action
# of the real run started no earlier than that replay lets it, so the measured bubble is never
# below it, in every repeat of every schedule:

# %%
print("measured >= replayed as run in every repeat of every schedule:",
      all(m >= r - 1e-9 for b in bubbles for m, r in zip(b.measured, b.as_run, strict=True)))

# %% [markdown]
# The last repeat of 1F1B with p = 2, m = 8, as it ran and as replayed from its own
# durations (milliseconds of wall-clock on this CPU; not checked):

# %% tags=["nbval-ignore-output"]
from IPython.display import display  # noqa: E402

shown = next(b for b in bubbles if b.kind == "1f1b")
measured_chart = plots.gantt(shown.timelines[0], title=f"{shown.label} (measured)", time_unit="ms")
replayed_chart = plots.gantt(shown.timelines[1], title=f"{shown.label} (replayed from the measured durations)",
                             time_unit="ms")
display(measured_chart, replayed_chart)  # both charts: a cell shows only its last expression

# %% [markdown]
# On GPUs, where a stage computes for milliseconds to seconds and the messages travel
# over NVLink or InfiniBand, the formula is the usual guide; the simulator adds link time
# when you give it one (section 6).
#
# ## 5 · PipeDream: asynchronous 1F1B and weight stashing
#
# PipeDream (Narayanan et al., SOSP 2019) never flushes the pipeline: each stage
# updates its weights after every backward. A mini-batch's backward must then use the
# weights its forward used, so each stage **stashes** one weight version per mini-batch
# in flight; PipeDream-2BW (ICML 2021) keeps two. torch does not ship it: labkit's
# version is written by hand on send/recv. **Predict:** with p = 4, how many versions
# does stage 0 keep?

# %%
predicted_versions_stage0 = None

# %%
grid = pipedream_runs.gradient_errors(4, 24, lrs=(3e-3,))
modes = {m: grid[3e-3, m] for m in pipedream.STASH_MODES}
print(checks.reveal_number(predicted_versions_stage0, modes["pipedream"][0].max_versions,
                           "Versions at stage 0 (measured)", "", 1.0, key="02.predict.pipedream_versions",
                           mistakes={"one, as with a flush (PipeDream-Flush): without it every mini-batch in flight "
                                     "needs its own": 1, "two, PipeDream-2BW's double buffer": 2}))
same = [s.forward_checksums == s.backward_checksums for s in modes["pipedream"]]
drift = [sum(f != b for f, b in zip(s.forward_checksums, s.backward_checksums, strict=True)) for s in modes["none"]]

# %%
print(report.pipedream_table(modes))
print("pipedream: backward used the forward's weights at every stage:", all(same))
print("no stashing: mini-batches whose backward saw other weights, per stage:", drift)

# %% [markdown]
# Does stashing matter? The loss per mini-batch of the three asynchronous modes beside
# synchronous training on the same data (one update per mini-batch, no staleness), at
# the default learning rate of 3e-3:

# %%
sync = pipedream_runs.synchronous_1f1b_losses(24)
curves = {"synchronous 1F1B": sync} | {f"async, {m}": s[-1].losses for m, s in modes.items()}
for label, losses in curves.items():
    print(f"{label:18} mean loss of the last 8 mini-batches: {pipedream_runs.mean_loss(losses, 8):.3f}")
plots.loss_curve(curves, title="Loss per mini-batch, lr 3e-3 (measured)")

# %% [markdown]
# What to see: every asynchronous curve ends above the synchronous one: each stage
# computes with weights up to p - 1 updates old (staleness), the price PipeDream pays
# for never flushing the pipeline. But the curve does **not** show the harm of skipping
# the stash: over 24 mini-batches of this tiny model, "none" ends between the two
# stashing modes, not below both. A loss curve is too coarse to see it. The gradient is not: the
# backward of each mini-batch was replayed in isolation with the weights its forward
# used (the true gradient, given the same incoming gradient), and the gradient each
# stage applied is compared with it (relative error ‖g − g_true‖ / ‖g_true‖, measured,
# at two learning rates). These runs are in float64: at the higher rate the training is
# chaotic enough that fp32's last-bit differences between two CPUs' kernels grow into the
# error's second digit, while float64's stay far below the digits printed (the runs above
# are fp32, and their stashed gradients are exact too, asserted below):

# %%
errors = pipedream_runs.gradient_errors(4, 24, lrs=(3e-3, 3e-2), modes=("pipedream", "none"), dtype="fp64")
print(report.gradient_error_table(errors))
for runs in (grid, errors):
    assert all(max(s.grad_error) == 0.0 for (lr, mode), stages in runs.items() if mode != "none" for s in stages)
    assert all(max(s.grad_error) > 0.0 for (lr, mode), stages in runs.items() if mode == "none" for s in stages[:-1])
print("with a stash (pipedream and 2bw in fp32, pipedream in fp64) every gradient equals the true one bit for bit;"
      " without, every stage but the last applies a wrong one")

# %% [markdown]
# Without stashing, the first stage (whose mini-batches wait longest between forward and
# backward) applies gradients far from the true ones; the error shrinks down the
# pipeline and is zero on the last stage, where each backward follows its forward at
# once. Its worst case (the largest column) grows with the learning rate, because the
# weights move further between a forward and its backward. PipeDream's weight stashing removes it entirely, at the
# memory cost in the versions table above; 2BW keeps at most two versions instead of up to p.
#
# %% [markdown]
# ## 6 · Scale: GPT-3 175B on 1,024 A100s
#
# The same formulas and the same simulator, on a real model and cluster (predicted):
# tensor parallel 8 inside a node, pipeline p = 16 across nodes over InfiniBand HDR,
# data parallel 8 with ZeRO stage 1, attention scores stored as Megatron-LM's 2021 kernels
# did (`attention="explicit"`). Stage times come from a roofline of each layer's
# kernels (`labkit.predict.compute`, the advisor's kernel model of notebook 09); the
# simulator adds the bubble, and ZeRO's traffic is a ring collective. Memory is in GiB
# (2^30 B), and "fits" compares it with the GPU's true capacity: an A100 sold as "80 GB"
# holds 80 GiB (notebook 01 printed it in both units).

# %%
gpt3, a100, ib = model_shape("gpt3-175b"), hardware.gpu("A100-80GB"), hardware.link("ib-hdr")
megatron = {"tp": 8, "pp": 16, "dp": 8, "zero_stage": 1, "attention": "explicit"}  # the s x s scores kept, as in 2021
layouts = {
    "GPipe, m=32": TrainingSetup(gpt3, seq=2048, schedule="gpipe", microbatches=32, **megatron),
    "1F1B, m=32": TrainingSetup(gpt3, seq=2048, microbatches=32, **megatron),
    "1F1B, m=128": TrainingSetup(gpt3, seq=2048, microbatches=128, **megatron),
    "interleaved v=2, m=32": TrainingSetup(gpt3, seq=2048, schedule="interleaved", microbatches=32, chunks=2,
                                           **megatron),
}
plans = {k: scale.plan(v, a100, ib, ib) for k, v in layouts.items()}
print(tables.text_table(
    ["layout (predicted)", "bubble sim.", "formula", "step s", "GiB per GPU",
     f"fits {a100.memory_bytes / 2**30:.0f} GiB"],
    [[k, f"{100 * p.bubble_simulated:.1f}%", f"{100 * p.bubble_formula:.1f}%", f"{p.step_seconds:.2f}",
      f"{p.memory_per_gpu / 2**30:.1f}", "yes" if p.fits else "no"] for k, p in plans.items()]))

# %% [markdown]
# A step of m = 128 takes longer than one of m = 32 because it trains on four times the
# tokens; per token it is faster, because less of it is bubble. Interleaving cuts the
# bubble without more micro-batches, at the price of more activations held and v times
# as many sends between stages.
#
# ## 7 · Break it
#
# **GPipe runs out of memory** at scale (above): keeping 32 micro-batches of
# activations per stage needs more than an A100's 80 GiB, while 1F1B, with the same
# bubble by the formula, fits.
# And a distributed job breaks in a way one process never does: one rank fails and the
# others wait for it forever. labkit's launcher reports which rank failed and why, and
# kills a rank that hangs after a timeout, leaving no process behind (real runs):

# %%
try:
    dist.run(dist.faulty_worker, 2, timeout=90, bad_rank=1, mode="raise")
except (dist.WorkerError, dist.WorkerTimeout) as err:
    print(f"{type(err).__name__}: {err}")
try:
    dist.run(dist.faulty_worker, 2, timeout=8, bad_rank=1, mode="hang")
except (dist.WorkerError, dist.WorkerTimeout) as err:
    print(f"{type(err).__name__}: {err}")

# %% [markdown]
# ## 8 · Design: a pipeline that fits and has a small bubble
#
# Pick the schedule, p, m, v, the data-parallel degree, the ZeRO stage, the GPU and the
# link between stages (predicted). Can you get GPT-3 175B under 10% bubble on A100-80GB
# and still fit? What does interleaving cost in memory?
#
# **Design task (checked):** GPT-3 175B on at most 1,024 A100-80GB GPUs, the stages
# linked by InfiniBand HDR (`ib-hdr`: a 16-stage pipeline spans servers), with a global
# batch of at most 1,536 sequences (m × the data-parallel degree, micro-batch 1: the
# batch of Megatron-LM's GPT-3 175B example). Get the bubble under 10% of the step while
# the layout still fits in memory. The bubble judged is the simulated one, which adds the
# sends between stages to the formula's (section 6), so solving the formula alone is not
# enough; and the batch cap ties m to the data-parallel degree. Press **Check my
# design**: it says whether the goal is met, and if not, what is still missing.

# %% tags=["nbval-ignore-output"]
from labkit.practice import design  # noqa: E402

pipeline_panel = PipelinePanel(pp=16, microbatches=32, dp=8, zero_stage=1)
pipeline_panel.set_task(design.task("02"))

# %% [markdown]
# ## Build it yourself: ZeRO stage 1
#
# Write ZeRO-1 in a module of your own: `build.open_stub` copies a stub to `build/zero1.py` beside this
# notebook (once; it never overwrites your work). Fill in `shard_bounds` and `Zero1AdamW`: pad the flat
# parameters to a multiple of the world size N, keep AdamW's states for your 1/N shard only,
# reduce-scatter the gradients, average them, step, all-gather the parameters.
#
# `build.check_build` runs your module on **2 and 4 real ranks** (gloo), with lr, betas, eps and weight
# decay drawn afresh each run, and checks what your ranks did against torch's AdamW on the whole batch,
# computed apart from your code: parameters after each of three steps, the gradient your AdamW saw,
# optimizer bytes per rank equal to ZeRO's 8Ψ/N (padding included), and traffic per step equal to 2Ψ
# (every collective your step runs, with its size). When a case fails, the feedback names the bug the
# evidence shows; each failed try shows one more hint. Below it runs on the blank stub: "not written yet".

# %%
from labkit.practice import build

zero1_path = build.open_stub("02.build.zero1")
print(zero1_path)

# %%
build.check_build("02.build.zero1", zero1_path)

# %% tags=["nbval-ignore-output"]
# When your module passes: seconds per step and optimizer bytes per rank, yours beside torch's
# ZeroRedundancyOptimizer on a wider MLP (times are shown, never checked).
# from labkit.practice.build import zero1 as build_zero1
# build_zero1.benchmark(zero1_path)

# %% [markdown]
# ## Build it yourself: ZeRO stage 2
#
# Stage 2 shards the gradients too: as backward produces each parameter's gradient, a hook reduces each
# slice of it to the rank that owns it (`dist.reduce`) and frees `p.grad`, so a rank keeps 4Ψ/N bytes of
# gradients instead of 4Ψ, for the same 2Ψ of traffic. `build.check_build` runs `Zero2AdamW` like ZeRO-1
# and also measures the gradient bytes your model still holds after backward (none).

# %%
zero2_path = build.open_stub("02.build.zero2")
print(zero2_path)

# %%
build.check_build("02.build.zero2", zero2_path)

# %% [markdown]
# ## Build it yourself: a 1F1B pipeline over send/recv
#
# Write the executor that `Schedule1F1B` is: `schedule_1f1b` gives each rank's order, `run_1f1b` runs
# one stage's forwards and backwards with `dist.isend`/`dist.recv` between ranks. `build.check_build` runs
# it on **2 and then 4 real ranks**: every rank records the forwards and backwards it **executed**, in
# order, and the check compares them with 1F1B's on every stage; the losses and the accumulated gradients
# must equal one process running the whole model, and the activations alive on rank 0 (**measured**) must
# peak at min(p, m) micro-batches. The measured bubble is shown beside the schedule's (p-1)/(m+p-1), with
# why it differs here. A deadlock is stopped after its timeout and named from where each rank was blocked.

# %%
onef1b_path = build.open_stub("02.build.onef1b")
print(onef1b_path)

# %%
build.check_build("02.build.onef1b", onef1b_path)

# %% [markdown]
# ## 9 · Check yourself

# %%
checks.check("02.bubble", None)

# %%
checks.check("02.zero3_gb", None)

# %%
checks.check("02.pipedream_stash_gb", None)

# %% [markdown]
# **Reasoning across results.** Put together the bubble's share of the step (the formula
# of section 4, which the simulation there matches exactly with equal stages) and the
# target in the question, then solve for the count.

# %%
from labkit.practice import reasoning  # noqa: E402, F401 - importing it registers the reasoning exercises

checks.check("02.reason.microbatches_for_10pct", None)

# %% [markdown]
# **Coding exercise.** Write the 1F1B schedule yourself: `one_f_one_b(rank, p, m)` returns
# the order in which rank `rank` of a p-stage pipeline runs its m micro-batches, as a
# list of `("F", i)` (forward of micro-batch i) and `("B", i)` (its backward), for m ≥ p.
# The check executes the orders of all ranks together in `labkit.sim`'s schedule replay
# (the simulator of section 4, with backward = 2 × forward) for several p and m, and
# passes when every micro-batch runs forward once and then backward once, no rank waits
# forever, rank r never holds more than p - r micro-batches in flight (the memory bound
# the runs of section 4 measured), and the bubble equals (p-1)/(m+p-1).

# %%
from labkit import practice  # noqa: E402


def one_f_one_b(rank, p, m):
    raise NotImplementedError  # your code here


practice.check_code("02.code.one_f_one_b", one_f_one_b)

# %% [markdown]
# **Handing in.** Every answer, committed prediction and check result is appended as you go to
# `labkit-journal.jsonl` beside this notebook, so a kernel restart loses nothing. To hand them in,
# run `checks.export_answers("answers-02.json", student="your name", notebook="02")` in a new
# cell: it writes every try in order with its verdict, and a summary scored by your committed guesses.
