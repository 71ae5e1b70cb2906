# %% [markdown]
# # 05 · Data reduction: recompute, mixed precision, quantization, and why compression fails
#
# **Why it matters.** The first instinct with too much data is to compress it. Model data
# resists: weights, gradients, optimizer states and most activations are dense floating-point
# numbers whose bytes look random, and a general-purpose compressor saves a few per cent in
# fp32 and about a fifth in bf16.
# Training reduces its data another way: it trades **compute** for memory (throw
# activations away and recompute them in backward: Chen et al. 2016, Korthikanti et al.
# 2022) or **precision** for memory (16-bit weights and activations: Micikevicius et al.
# 2018; 8-bit optimizer states: Dettmers et al. 2022).
#
# Below, every byte is measured on real training steps of the tiny GPT and put beside the
# formula that predicts it; the scale-up to real models and GPUs is labkit's model.

# %%
from labkit.measure import measure_step
from labkit.predict.tables import text_table
from labkit.reduction import (
    checkpoint_plan,
    compress,
    design,
    optim8bit,
    planes,
    precision,
    quantize,
    recompute,
    tradeoffs,
    weight_quant,
)
from labkit.reduction import exercises as _exercises  # noqa: F401  (registers the 05.* exercises)
from labkit.rig.model import GPTConfig
from labkit.rig.train import TrainConfig, seed_everything
from labkit.teach import checks, plots

seed_everything(0)

# %% [markdown]
# ## 1 · Compression first: does it work on model data?
#
# zstd compresses text several-fold, lz4 more than twofold. **Predict:** what ratio (raw bytes / compressed
# bytes) does zstd reach on the fp32 weights of a trained model? On its gradients?
#
# Beside the run's tensors, three text samples of equal size (the `raw KB` column): two real ones that ship with
# Python (its `email` package's source code, and `pydoc_data/topics.py`, the Language
# Reference text that `help()` shows; a fixed list of standard-library files, so the same
# Python gives the same bytes), and the lab's own corpus, labelled *synthetic*: a small
# generated grammar the tiny GPT trains on. The run is trained in float64 and its tensors are
# stored as fp32 and bf16, as a training run holds them: in fp32 the last bits, and with them
# a compressor's matches, would change with the CPU's kernels.

# %%
predicted_weight_ratio = None  # e.g. 2.0

# %%
data = compress.samples()
rows = compress.compression_table(data)
weights = next(r for r in rows if r.kind == "weights" and r.dtype == "fp32")
print(checks.reveal_number(predicted_weight_ratio, weights.zstd3, "zstd-3 on fp32 weights (measured)", "", 1,
                           key="05.predict.zstd_ratio"))

# %%
print(compress.ratio_text(rows))

# %% [markdown]
# Read the table column by column. **H** is the order-0 entropy of the byte stream in bits
# per byte, and **8/H** the best ratio a coder of independent bytes can reach (Shannon):
# the prediction beside each measurement. Dense fp32 data sits above 7 of 8 bits, so zstd
# lands right at the bound, a few per cent, and lz4 saves nothing. Real text compresses
# several-fold, well beyond its 8/H, because it repeats whole strings (keywords, identifiers,
# phrases); the synthetic corpus repeats far more than real writing, so its ratio overstates
# what text gives: compare model data with the real rows. In the `gradients` rows each key bias
# has its exact gradient, zero (softmax ignores a shift shared by a row's scores; the computed
# value is rounding noise, different on every CPU), which is why those rows are the same bytes
# on every machine. What does compress in a model is **zeros**: the
# causally masked half of the attention probabilities and post-ReLU activations (ReLU
# applied to the run's real MLP pre-activations; this GPT uses GeLU, which makes no exact
# zeros). The `activations` row is helped by the attention probabilities inside it.
#
# Where is the little redundancy that dense floats have? Split each fp32 number into its
# exponent byte and three mantissa bytes (ZipNN's byte grouping, Hershcovitch et al. 2024)
# and compress each plane on its own:

# %%
print(planes.plane_text(planes.plane_stats(data["weights", "fp32"], "fp32")))

# %% [markdown]
# The exponent takes a few dozen distinct values at most and compresses; the mantissa
# bytes are random. That caps lossless compression of dense weights near the `split`
# columns above, a little more in bf16, which has fewer mantissa bits. Memory has to come
# from elsewhere.
#
# The speed of each codec on this machine, in MB (1e6 bytes) per CPU second of the thread that
# compresses, the fastest of up to three runs after an untimed warm-up call: the first call of a
# codec builds its context, and timed alone it once made the first row read 56 MB/s beside 500-800
# for the rest; CPU seconds leave out the time other processes on a shared machine hold the core.
# Each figure still moves a little from run to run, so nbval does not check them. lz4 is the
# fastest on every row and zstd-19 the slowest, by one to two orders of magnitude: level 19 searches far
# longer for matches, and on model data finds few more (compare its ratios with zstd-3's).

# %% tags=["nbval-ignore-output"]
print(compress.ratio_text(rows, speed=True))

# %%
speed = compress.speed_trends(rows)  # what the text above claims of that table
for claim, held in speed.items():
    print(f"{claim}: {'yes' if held else 'NO'}")
assert all(speed.values()), speed

# %% [markdown]
# ## 2 · Recompute: trade compute for memory
#
# `torch.utils.checkpoint` drops a region's saved tensors in forward and runs the region again
# in backward. The symbols are Korthikanti et al.'s, as in notebook 00's table: s the sequence
# length, b the micro-batch size, h the hidden size, a the attention heads. One layer keeps
# sbh(34 + 5as/h) bytes of activations at 16 bits; the 5as/h term is what its a attention
# matrices of s × s keep (the softmax's output, its dropout mask and the dropout's output).
# Four plans on the tiny GPT (4 layers): **full** (every block keeps only its input, 2sbh
# bytes at 16 bits, 4sbh in this fp32 run), **every-2** (every second block recomputed,
# keeping only its input; the blocks between keep everything), **sqrt-all** (after Chen et al.:
# segments of about √n blocks, every one recomputed and keeping only its input) and
# **selective** (Korthikanti et al.: only the attention core, which drops the 5as/h term).
# **Predict:** with full recompute, what percentage of a layer's activations is kept?

# %%
predicted_full_share = None  # per cent

# %%
micro = TrainConfig(model=GPTConfig(vocab_size=35, n_layer=4, n_head=2, d_model=32, seq_len=16), batch_size=2,
                    threads=1)
plans = recompute.compare_plans(micro)
none, full = plans[0], plans[1]
assert all(r.measured_bytes == r.predicted_bytes and r.grads_identical for r in plans)
assert all(r.extra_flops == r.predicted_extra_flops for r in plans)
print(checks.reveal_number(predicted_full_share, 100 * full.per_layer[0] / none.per_layer[0],
                           "Share of a layer's activations kept under full recompute (measured)", "%", 1,
                           key="05.predict.full_recompute_share"))

# %%
print(recompute.recompute_table(plans))

# %% [markdown]
# The three plans over one step, storage by storage (`labkit.measure.timeline`, measured): without recompute the
# saved activations rise through the forward pass and fall through the backward; selective recompute drops the
# attention core's share of that rise; full recompute keeps almost none, and its backward rebuilds one layer at a
# time (the saw teeth). What a checkpoint keeps for itself, each block's input, is filed with the temporaries:
# autograd's outer hooks never see it. The model states underneath are the same in all three.

# %%
from labkit.measure.timeline import step_timeline  # noqa: E402
from labkit.rig.train import Trainer  # noqa: E402
from labkit.teach.plots_timeline import timelines_side_by_side  # noqa: E402

timelines = {}
for plan in ("none", "selective", "full"):
    stepper = Trainer(micro)
    recompute.apply_recompute(stepper.model, plan)
    stepper.step()
    timelines[plan] = step_timeline(stepper)
for plan, tl in timelines.items():
    print(f"{plan:9} peak {tl.peak:>9,} B ({tl.peak_phase}); saved activations at most "
          f"{max(tl.alive['activations']):>7,} B, temporaries at most {max(tl.alive['temporaries']):>7,} B")
assert timelines["full"].peak < timelines["selective"].peak < timelines["none"].peak
timelines_side_by_side(list(timelines.values()), list(timelines))

# %% [markdown]
# (`sqrt-all` keeps only the inputs of its two segments after forward, fewer bytes than `full`,
# but in backward it re-materialises a whole two-block segment at once: its *peak* is
# higher. Section 3 measures peaks.)
#
# Every byte is predicted exactly (Korthikanti's terms plus each LayerNorm's mean and
# 1/σ, which the paper rounds away), every FLOP too, and the gradients are bit-identical
# with dropout on: checkpoint saves the random-number state before a region and replays
# it. The price is compute: full recompute repeats every block's forward, a third more
# FLOPs for the layers.
#
# **Selective recompute, two counts.** The attention core's forward is two matmuls, QKᵀ and
# the probabilities times V, 2bs²h FLOPs each per layer. Korthikanti et al. (2022, §5)
# re-run the whole core: 4bs²h a layer, labkit's `estimate.training_flops` count. torch's
# non-reentrant checkpoint stops recomputing as soon as every tensor backward needs is back
# (`early_stop`, its default); the second matmul saves its inputs, not its output, so it is
# never re-run: only QKᵀ, 2bs²h a layer, and that is what the `predicted extra` column above
# predicts and the FLOP counter measures.
#
# What does it buy? Korthikanti et al. report for GPT-3 175B that selective recompute cuts
# activation memory by about 70% for about 2.7% more FLOPs. The tiny GPT (measured, fp32)
# beside GPT-3 (labkit's model, 16-bit, s = 2,048, b = 1):

# %%
from labkit.shapes import ModelShape, model_shape

selective, tiny, gpt3 = plans[-1], ModelShape.from_config(micro.model), model_shape("gpt3-175b")
assert selective.extra_flops == tradeoffs.selective_extra_flops(tiny, 16, 2, early_stop=True)  # measured = model
headline = [(tradeoffs.measured_tradeoff("tiny GPT (measured)", tiny, 16, 2, none.per_layer[0],
                                         selective.per_layer[0], none.flops, selective.extra_flops), tiny),
            (tradeoffs.selective_tradeoff(gpt3, 2048, name="GPT-3 175B (labkit's model)"), gpt3)]
print(tradeoffs.selective_text(headline))

# %% [markdown]
# Selective recompute removes the attention scores' 5as/h term of a layer's sbh(34 + 5as/h)
# bytes, so what it saves is 5as/h against 34: small for the tiny GPT's short sequences,
# about 70% for GPT-3's 2,048 tokens and 96 heads, the paper's figure. For the FLOPs, the
# paper's 2.7% matches the last column, the core's forward *and* backward share of a step
# (the last two columns are labkit's counts, for both rows);
# re-running the core's forward once costs a third of that (the paper's own count of what
# is repeated), and torch's early stop half of that. All three are small against full
# recompute's third: that is the paper's point.
#
# What it costs on this CPU (wall clock, the median of five runs of each step, not checked).
# It need not follow the FLOP counts above: a step of this toy is many small kernels whose
# fixed cost (Python, dispatch, allocating the tensors checkpoint rebuilds) outweighs their
# arithmetic, so a plan that repeats few FLOPs can still cost a visible share of the step,
# and other work on this machine's cores moves every figure (hence the median). On a large model,
# where the arithmetic dominates, time follows the FLOPs.

# %% tags=["nbval-ignore-output"]
for r in plans:
    print(f"{r.mode:10} {1e3 * r.step_seconds:6.1f} ms per forward + backward "
          f"({r.step_seconds / none.step_seconds:.2f}x no recompute)")

# %% [markdown]
# ## 3 · The best plan for a budget
#
# Uniform plans are easy to state but not the cheapest. From one recorded step (each
# block's saved bytes, its input, its forward FLOPs and the memory peak during its
# backward), a dynamic programme finds the plan with least recompute under a budget, in
# the spirit of Checkmate (Jain et al. 2020) over the space of "which blocks, in which
# segments". Six layers, a budget halfway between the smallest feasible peak and the peak
# without recompute:

# %%
six = TrainConfig(model=GPTConfig(vocab_size=35, n_layer=6, n_head=2, d_model=32, seq_len=16), batch_size=2,
                  threads=1)
trace = checkpoint_plan.record_trace(six)
lowest = checkpoint_plan.min_feasible_budget(trace)
budget = (lowest + checkpoint_plan.predict_peak(trace, recompute.uniform_plan("none", 6))) // 2
choices = checkpoint_plan.plan_table(trace, budget)
print(checkpoint_plan.plan_text(choices, budget))
best = choices[-1]
peak = checkpoint_plan.check_peak(six, trace, best.plan)
print(f"optimal plan applied to a real step: peak {peak.measured:,} B measured, {peak.predicted:,} B predicted")

# %% [markdown]
# The cheapest plan checkpoints only the first block: the step's peak comes during the
# *last* block's backward, when the lower blocks' activations are all still alive, so
# dropping one early block's is enough (every block here costs the same to recompute). A
# uniform rule pays for blocks that never mattered: `every-5` also checkpoints block 5, for
# the same peak as `optimal` at twice its recompute.
#
# ## 4 · Mixed precision: 16 bytes per parameter, and fewer activation bytes
#
# **Predict:** mixed-precision Adam keeps 16-bit weights and gradients plus fp32 master
# weights and two fp32 moments. How many bytes per parameter is that, against fp32
# training's 16?

# %%
predicted_mixed_bytes = None

# %%
cfg = precision.micro_model()
precision_rows = []
for name in precision.PRECISIONS:
    run = precision.precision_trainer(name, cfg)
    run.step()
    measured = measure_step(run)
    comparison = precision.precision_comparison(measured, cfg, 4, name)
    assert comparison.worst_error == 0
    per_param = measured.model_states / sum(p.numel() for p in run.model.parameters())
    precision_rows.append((name, per_param, measured.activations_per_layer()[0]))
print(checks.reveal_number(predicted_mixed_bytes, per_param, "Bytes per parameter, fp16-mixed (measured)", "", 1,
                           key="05.predict.mixed_bytes"))

# %%
for name_i, per_param_i, act_i in precision_rows:
    print(f"{name_i:14} model states {per_param_i:.0f} B/param; activations per layer {act_i:,} B "
          "(measured = predicted)")

# %% [markdown]
# Mixed precision saves **no** model-state memory with Adam: 2 + 2 + 12 = 16 bytes, the
# same as fp32's 4 + 4 + 8 (Rajbhandari et al., ZeRO, SC 2020, section 3.1). Its gain is in
# activations (close to half the bytes) and speed. Autocast alone (`bf16-autocast`, fp32
# weights) saves less than half: the residual stream stays fp32, and each matmul keeps a bf16
# copy of its weight for backward.
#
# Losses of the four runs side by side (measured). The 16-bit runs' last digits depend on the
# CPU's kernels, so the table prints what no machine changes: the loss to one decimal and
# whether each run stays within a stated tolerance of fp32's; the curves show the rest:

# %%
runs = precision.precision_runs(steps=60)
tol = precision.LOSS_TOLERANCE
for name, (step_gap, eval_gap) in precision.gaps_to_fp32(runs).items():
    print(f"{name:14} eval loss {runs[name].eval_loss:.1f}; every step's loss within {tol} nats of fp32's: "
          f"{'yes' if step_gap < tol else 'no'}; eval loss within {tol}: {'yes' if eval_gap < tol else 'no'}; "
          f"skipped steps {list(runs[name].skipped_steps)}")
plots.loss_curve(precision.loss_curves(runs), title="Training loss by precision (measured)")

# %% [markdown]
# ## 5 · Break it: fp16 without loss scaling
#
# fp16 keeps 5 exponent bits, bf16 keeps fp32's 8. What that means for each one's range,
# from `torch.finfo`:

# %%
for r in precision.dynamic_range():
    print(f"{r.dtype:9} max {r.max:.3g}, smallest normal {r.smallest_normal:.3g}, "
          f"smallest subnormal {r.smallest_subnormal:.3g}: {r.decades:.1f} orders of magnitude")

# %% [markdown]
# Gradients of a large model are small numbers; many fall below fp16's smallest subnormal
# and flush to zero. To show it on the tiny model its loss is multiplied by 2⁻¹² (in the
# fp32 reference too), which puts most gradients below fp16's normal range (the share is
# printed with the answer), where Micikevicius et al. (2018, section 3.3 and Fig. 3) found
# many of an SSD object detector's activation gradients. **Predict:** what percentage of the
# gradient's elements flush to zero in fp16 without scaling?

# %%
predicted_flushed = None  # per cent

# %%
under = precision.gradient_underflow(scales=(1.0, 2.0**8, 2.0**16, 2.0**32))
print(checks.reveal_number(predicted_flushed, 100 * under[0].flushed_fraction,
                           "Flushed without scaling (measured)", "%", 1, key="05.predict.flushed_share"))

# %%
print(f"before any loss scale, {precision.share_text(under[0].below_normal_fraction)} of the fp32 gradient's "
      "non-zero elements lie below fp16's smallest normal (the reference, computed in fp64)")
for u in under:
    print(f"loss scale 2^{int(u.scale).bit_length() - 1:<2}: {precision.share_text(u.flushed_fraction):>8} of the "
          f"gradient's non-zero elements flushed to zero; {'some' if u.overflowed else 'none'} overflowed to inf/NaN")

# %% [markdown]
# Scaling the loss by 2¹⁶ lifts the gradients back into range; scaling too far overflows.
# So `GradScaler` scales **dynamically**: when a step's gradients hold an inf it skips the
# step and halves the scale. Started at 2²⁴ (this run's choice; torch's default initial
# scale is 2¹⁶), it skips steps until the scale is right, then
# trains; were the gradients to overflow again later, it would skip and halve again (growth back up
# waits for 2,000 clean steps, torch's default):

# %%
trace_over = precision.overflow_recovery(steps=30)
print(f"skipped steps {list(trace_over.skipped_steps)}; first update at step {trace_over.first_update}")
print("scale per step: " + " ".join(f"2^{int(s).bit_length() - 1}" for s in trace_over.scales[:12]) + " ...")
print(f"loss after 30 steps {trace_over.losses[-1]:.1f}")

# %% [markdown]
# ## 6 · Quantization: 8-bit optimizer states, 8- and 4-bit weights
#
# Adam keeps two fp32 moments per parameter: 8 bytes. Dettmers et al. (ICLR 2022) store each
# as 8-bit codes in blocks of 2,048 values with one fp32 absmax scale per block, using a
# non-linear "dynamic" code book whose values span seven orders of magnitude (Adam's second
# moment does). **Predict:** bytes of optimizer state per parameter at 8 bits, and does the
# tiny GPT still train as well as with fp32 Adam?

# %%
predicted_state_bytes = None  # bytes per parameter
predicted_trains_as_well = None  # True or False

# %%
qcfg = optim8bit.micro_train_config()
steps = 100
trained, fp32_run = optim8bit.train_with(qcfg, steps, "fp32")
opt_runs = optim8bit.OptimizerComparison(steps, (fp32_run, *(optim8bit.train_with(qcfg, steps, m)[1]
                                                             for m in quantize.MAPS)))
assert all(r.state_bytes == r.predicted_bytes for r in opt_runs.runs)
eight = opt_runs.run("8-bit AdamW (dynamic)")
print(checks.reveal_number(predicted_state_bytes, eight.bytes_per_param, "Bytes per parameter, 8-bit (measured)",
                           "", 1, key="05.predict.state_bytes_8bit"))
print(checks.reveal_claims({"trains as well": predicted_trains_as_well},
                           {"trains as well": abs(eight.eval_loss - fp32_run.eval_loss) < 0.05},
                           key="05.predict.trains_as_well"))

# %%
print(text_table(["optimizer", "state B (measured)", "predicted B", "bytes/param", "final loss", "eval loss",
                  "eval within 0.05 of fp32"],
                 [[r.name, f"{r.state_bytes:,}", f"{r.predicted_bytes:,}", f"{r.bytes_per_param:.3f}",
                   f"{r.final_loss:.1f}", f"{r.eval_loss:.1f}", "yes" if abs(r.eval_loss - fp32_run.eval_loss) < 0.05
                   else "no"] for r in opt_runs.runs]))

# %% [markdown]
# The *dynamic* code book is what makes it work. With a **linear** 8-bit grid (the same
# bytes), small entries of the second moment v round to zero, Adam's update m/(√v + ε)
# becomes m/ε, and training blows up (the `nan` above, measured). After one step of fp32
# Adam, quantized with each grid:

# %%
from labkit.reduction.optim8bit import moment_round_trip

# one decimal of a percent: a share two decimals wide sat one or two of 104,383 entries from its rounding edge
trips = moment_round_trip(optim8bit.train_with(qcfg, 1, "fp32")[0].optimizer)
print(text_table(["grid", "moment", "rounded to 0", "median rel. error"],
                 [[r.map, r.moment, f"{100 * r.zero_fraction:.1f}%", f"{r.median_rel_error:.3f}"] for r in trips]))
zeros = {(r.map, r.moment): r.zero_fraction for r in trips}
assert zeros["linear", "v"] > 10 * zeros["dynamic", "v"]  # the linear grid loses v's small entries

# %% [markdown]
# Weights can be stored with fewer bits too, for checkpoints and inference: blocks of 64
# with one fp32 absmax each, 8-bit and 4-bit (two codes per byte), the layout QLoRA uses
# (here with a linear 4-bit grid, not its NF4), for the weight matrices only: biases and
# LayerNorm vectors stay fp32, so `bytes/param` sits a little above the codes and scales
# alone. The trained fp32 model from above, its
# weights quantized, written to a real file, read back (`weights_only=True`) and evaluated:

# %%
stored = weight_quant.compare_storage(trained)
print(text_table(["bits", "payload B (measured)", "predicted B", "bytes/param", "rel. weight error", "eval loss",
                  "eval within 0.05 of 32-bit"],
                 [[r.bits, f"{r.payload_bytes:,}", f"{r.predicted_bytes:,}", f"{r.bytes_per_param:.3f}",
                   f"{r.rel_error:.1e}", f"{r.eval_loss:.1f}", "yes" if abs(r.eval_loss - stored[0].eval_loss) < 0.05
                   else "no"] for r in stored]))
assert all(r.payload_bytes == r.predicted_bytes for r in stored)

# %% [markdown]
# ## 7 · Scale and design: a real model on a real GPU
#
# GPT-2 XL (about 1.5 bn parameters, 16 B of model states each with bf16 mixed precision and
# Adam; s = 1,024) on an RTX 4090, a card sold as "24 GB" (predicted).
# Capacities here are true capacities: a GPU sold as "24 GB" holds 24 GiB (2³⁰ bytes each),
# and every fit below is judged against that; GB means 1e9 bytes. **Predict:** does it fit with
# bf16 mixed precision and no recompute? With full recompute?

# %%
predicted_fit_none = None  # True or False
predicted_fit_full = None  # True or False

# %%
from labkit import hardware

xl = {m: design.evaluate("gpt2-xl", "RTX-4090", 1, 1024, recompute=m) for m in design.RECOMPUTE_MODES}
print(checks.reveal_claims({"fits, no recompute": predicted_fit_none, "fits, full recompute": predicted_fit_full},
                           {"fits, no recompute": xl["none"].fits, "fits, full recompute": xl["full"].fits},
                           key="05.predict.fits_xl"))
cheapest = design.cheapest_fit("gpt2-xl", "RTX-4090", 1, 1024)

# %%
print(f"RTX-4090: {design.capacity_text(hardware.gpu('RTX-4090'))}; extra compute of selective: the core's "
      "whole forward (Korthikanti's count)")
for mode, d in xl.items():
    print(f"{mode:10} {d.total_bytes / 1e9:5.1f} GB, extra compute {100 * d.extra_compute:4.1f}%: "
          f"{'fits' if d.fits else 'does not fit'}")
print(xl["none"].reason)
print(f"cheapest change that fits: {cheapest.label}: {cheapest.total_bytes / 1e9:.1f} GB, "
      f"+{100 * cheapest.extra_compute:.1f}% compute")

# %% [markdown]
# The model states take almost the whole card, so recompute has only the activations to work
# with, and only full recompute shrinks them far enough, for the most extra compute of the four
# (close to a third, printed above). The cheapest change that fits is not recompute at all:
# 8-bit Adam states (section 6) free more bytes than any recompute mode, at no extra compute.
#
# Why does per-layer full recompute hold *less* than Chen et al.'s √n plan (`sqrt` in the
# table above and in the panel: segments of ⌊√L⌋ layers, the last one kept whole; section 2's
# `sqrt-all` recomputes every segment), which was designed to minimise memory? Chen's
# argument: keep each segment's input, rebuild one segment of k layers at a time, so the peak
# is about (L/k)·input + k·layer, least at k = √L *when a kept input costs as much as a
# layer's activations*. A transformer layer's input is 2sbh bytes beside its sbh(34 + 5as/h)
# of activations. Every segment length for GPT-2 XL, counted the same way for each (kept
# inputs plus the segment being rebuilt):

# %%
xl_shape = model_shape("gpt2-xl")
segments = tradeoffs.segment_sweep(xl_shape, 1024)
print(tradeoffs.segment_text(segments, xl_shape))
print(f"best segment length sqrt(L x input / layer) = {tradeoffs.best_segment_estimate(xl_shape, 1024):.2f} layers, "
      f"against Chen's sqrt(L) = {design.sqrt_segment(xl_shape.layers)}")
assert min(segments, key=lambda r: r.peak_bytes).segment == 1

# %% [markdown]
# With inputs this cheap beside the layers, the optimum segment is a single layer: per-layer
# full recompute *is* the minimum-memory plan, and √L segments keep several whole layers
# alive at once while one is rebuilt. (The design table's `full` row counts only the stored
# inputs, as Korthikanti et al.'s Table 2 does; while a layer is rebuilt its activations are
# alive too, which the sweep's first row includes: still far below the √L plan.)

# %% [markdown]
# Now design: pick a model, a GPU, the sequence and micro-batch, and combine recompute,
# precision and optimizer-state bits until it fits with the least extra compute. Try
# Llama-2 7B at s = 4,096 on an A100-80GB. That is the checked task below: set the controls,
# then press "Check my design"; it says whether the setting fits and, if it fits, whether
# another combination fits with less recompute.

# %% tags=["nbval-ignore-output"]
from labkit.practice import design as design_tasks  # noqa: E402
from labkit.reduction.panel import ReductionPanel

reduction_panel = ReductionPanel(model="llama2-7b", gpu="A100-80GB", seq=4096, micro_batch=1)
reduction_panel.set_task(design_tasks.task("05"))

# %% [markdown]
# ## 7b · Fine-tuning a 7B model on one card: LoRA and QLoRA
#
# A full fine-tune keeps 16 bytes of model states a parameter (section 4), far beyond a 24 GB
# card for a 7B model. LoRA (Hu et al. 2021) freezes every weight and trains, beside chosen
# matrices W (in × out), a low-rank product B·A: r·(in + out) parameters each, the only ones
# with gradients and AdamW states. QLoRA (Dettmers et al. 2023) also stores the frozen
# matrices in 4-bit NF4, in blocks of 64 weights with one fp32 scale each (this lab's
# default; the paper also quantizes those scales to 8 bits, its double quantization, which
# the claims at the end of this section use).
#
# **Predict:** Llama-2 7B, LoRA r = 16 on W_q and W_v, micro-batch 1, 1,024 tokens, bf16
# mixed precision, no recompute. How many GB (1e9 bytes) does one step hold at its peak on a GPU?

# %%
predicted_lora_7b_gb = None  # a number, in GB

# %%
from labkit import hardware
from labkit.predict import finetune_fit
from labkit.predict.finetune import Finetune, finetune_bytes, layer_terms
from labkit.predict.tables import text_table
from labkit.shapes.hf_config import shape_from_hf_config
from labkit.teach import checks

llama7b = shape_from_hf_config("llama-2-7b")
rtx = hardware.gpu("RTX-4090")
lora = Finetune("lora", rank=16, targets=("q", "v"))
lora_fit = finetune_fit.fit(llama7b, lora, 1, 1024, rtx)
print(checks.reveal_number(predicted_lora_7b_gb, lora_fit["bytes"], "Llama-2 7B LoRA step's peak (predicted)",
                           key="05.predict.lora_7b_gb"))

# %% [markdown]
# **Measure.** The same config cut to two layers (every width kept), wrapped by `peft`'s LoRA
# and trained for real on this CPU: a warm-up step, then one step measured by category beside
# labkit's prediction for the same slice (32 tokens, so that it runs in seconds).

# %%
from labkit.measure.finetune import compare_finetune

slice_7b = compare_finetune("llama-2-7b", lora, batch=1, seq=32, precision="bf16-mixed", layers=2)
print(slice_7b)
assert all(measured == predicted for measured, predicted in slice_7b.categories.values())

# %% [markdown]
# Every category agrees to the byte (asserted), and so does each layer; the whole-step peak, its
# temporaries included, is not asserted and lands within a few bytes. The frozen base is held
# once, at 2 bytes a weight; only the adapters have gradients and optimizer states. The
# activations are not those of full training: a frozen linear layer keeps no input (only its
# weight's gradient would need it), and nothing before the first adapter needs a gradient at
# all, so the first layer keeps less than the second. But the gradient still passes back through
# every frozen layer, so the norms, the attention kernel and the activation function keep what
# they keep in full training. What one layer keeps, at the slice's 32 tokens:

# %%
print(text_table(["what layer 1 keeps", "bytes (predicted)"],
                 [[t.role, f"{t.bytes:,.0f}"] for t in layer_terms(llama7b, lora, 32, 1, 2)]))
print(f"measured: layer 0 {slice_7b.layers[0][0]:,} B, layer 1 {slice_7b.layers[1][0]:,} B")

# %% [markdown]
# **Scale.** The whole model, 32 layers at 1,024 tokens, on an RTX 4090: labkit's model, the
# same terms as the slice. The fit here is judged against what torch can allocate of the card
# (the catalogue's `usable_memory_bytes`, printed as "usable"), a little less than the 24 GiB
# that section 7 judged against.

# %%
whole = finetune_bytes(llama7b, lora, 1024, 1, "bf16-mixed")
print(text_table(["Llama-2 7B, LoRA r=16 on q,v", "GB"], [[k, f"{v / 1e9:.2f}"] for k, v in {
    "frozen base (bf16)": whole.frozen, "adapters": whole.adapters, "adapter gradients": whole.gradients,
    "AdamW moments + fp32 master weights": whole.optimizer, "activations": whole.activations}.items()]))
print(f"whole-step peak {lora_fit['bytes'] / 1e9:.2f} GB in the {lora_fit['phase']} phase; {rtx.name}: "
      f"{lora_fit['usable_bytes'] / 1e9:.2f} GB usable: {'fits' if lora_fit['fits'] else 'does not fit'}, "
      f"{lora_fit['headroom_bytes'] / 1e9:+.2f} GB")

# %% [markdown]
# **Break it.** One lever at a time from that setting: a longer sequence, a higher rank, every
# linear layer targeted, gradient checkpointing, and QLoRA's 4-bit base.

# %%
levers = finetune_fit.lever_rows(llama7b, lora, 1, 1024, rtx)
print(text_table(["setting", "peak GB", "spare GB", "fits"],
                 [[r.label, f"{r.peak / 1e9:.2f}", f"{r.headroom / 1e9:+.2f}", "yes" if r.fits else "no"]
                  for r in levers]))

# %% [markdown]
# The sequence is what breaks it: the frozen layers' activations grow with every token. A higher
# rank adds mostly adapters, their gradients and their states; targeting every linear layer adds
# those and also activations (each adapted linear keeps its input for its adapter's gradient);
# either adds less than doubling the sequence does. Gradient
# checkpointing (each layer keeps its input and is rebuilt in backward) and the 4-bit base buy
# the room back.
#
# **Predict again:** QLoRA keeps Llama-2 7B's frozen matrices in NF4 (half a byte a weight, and
# an fp32 absmax for each block of 64) and its embeddings, norms and output layer in bf16. How
# many GB does the frozen base take?

# %%
predicted_qlora_base_gb = None  # a number, in GB

# %%
qlora = Finetune("qlora", rank=16, targets=("q", "v"))
qlora_base = finetune_bytes(llama7b, qlora, 1024, 1, "bf16-mixed").frozen
print(checks.reveal_number(predicted_qlora_base_gb, qlora_base, "Llama-2 7B's NF4 base (predicted)",
                           key="05.predict.qlora_base_gb"))

# %% [markdown]
# **The papers' claims**, predicted under their own conventions (`datasets/finetune_claims.toml`,
# each with its source): QLoRA's 65B on one 48 GB GPU and 33B on one 24 GB GPU, judged on the
# whole step's peak; LoRA's GPT-3 175B training memory and checkpoint, judged on 16-bit model
# states and 16-bit adapters.

# %%
from labkit.predict.finetune_claims import check_claims

for c in check_claims():
    print(f"{c.id}: {c.claim}\n  claimed {c.claimed / 1e9:,.4g} GB, labkit {c.predicted / 1e9:,.4g} GB: "
          f"{'holds' if c.holds else 'does not hold'}\n  conventions: {c.conventions}")

# %% [markdown]
# ## Build it yourself: selective recompute
#
# Write Korthikanti et al.'s selective recompute yourself: `selective_forward(block, x)`, labkit's transformer
# layer with only the attention core (`block.attn.core`: Q K^T, softmax, dropout, times V) under
# `torch.utils.checkpoint`, every linear layer's input kept. `build.open_stub` copies a stub, with the layer's
# plain forward in it, to `build/selective_recompute.py` beside this notebook (once).
#
# `build.check_build` runs it in a child process on a layer drawn per run, dropout on, beside the plain layer
# this process runs itself: output and gradients bit-identical, and the bytes autograd keeps equal to the
# selective prediction above (the 5as²b term gone, nothing else). Recomputing nothing, the whole block, more
# than the core, or with a different dropout mask is named in the feedback. Below it runs on the blank stub.

# %%
from labkit.practice import build

recompute_path = build.open_stub("05.build.selective_recompute")
print(recompute_path)

# %%
build.check_build("05.build.selective_recompute", recompute_path)

# %% [markdown]
# ## 8 · Check yourself

# %%
checks.check("05.full_recompute_mb", None)

# %%
checks.check("05.adam8bit_gb", None)

# %%
checks.check("05.selective_percent", None)

# %%
checks.check("05.fp16_max", None)

# %% [markdown]
# **Reasoning across results.** Put two of section 2's results together: what full
# recompute saves on one layer (all but the layer's input) and what selective recompute
# saves (the attention scores' 5as/h term, the GPT-3 row of the table), each the bytes kept
# without recompute minus the bytes kept with it. For GPT-3 175B's layer at s = 2048,
# b = 1: what fraction of full recompute's saving does selective recompute get? Answer as a
# fraction (0 to 1), not per cent.

# %%
from labkit.practice import reasoning  # noqa: E402, F401 - importing it registers the reasoning exercises

checks.check("05.reason.selective_share", None)

# %% [markdown]
# **Coding exercise.** Write section 5's dynamic loss scaling yourself:
# `update_scale(scale, good_steps, found_inf, growth_interval)` returns `(new_scale,
# new_good_steps)` after one fp16 step. A step whose gradients overflowed is skipped and
# halves the scale; `growth_interval` clean steps in a row double it. The check runs torch's
# own `GradScaler` on a real parameter whose gradient overflows at chosen steps, and
# compares your scale with torch's after every step.

# %%
from labkit import practice  # noqa: E402


def update_scale(scale, good_steps, found_inf, growth_interval):
    raise NotImplementedError  # your code here


practice.check_code("05.code.update_scale", update_scale)

# %% [markdown]
# **Handing in.** Every answer, committed prediction and check result is appended as you go to
# `labkit-journal.jsonl` beside this notebook, so a kernel restart loses nothing. To hand them in,
# run `checks.export_answers("answers-05.json", student="your name", notebook="05")` in a new
# cell: it writes every try in order with its verdict, and a summary scored by your committed guesses.
