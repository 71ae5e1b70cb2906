# %% [markdown]
# # 01 · Storage challenges: what training holds in memory
#
# **Why it matters.** A GPU running a training step holds four kinds of data: the
# model's **parameters**, their **gradients**, the **optimizer states** (Adam keeps two
# moments per parameter, and mixed precision adds an fp32 master copy), and the
# **activations** every layer saves in the forward pass so the backward pass can use
# them. The first three grow with the model; activations grow with the model *and*
# with the batch and the sequence length. For GPT-3 175B split over 1,024 A100s
# (tensor 8 × pipeline 16, the layout of Megatron-LM's GPT-3 175B example script, with
# data 8 to fill 1,024 GPUs), labkit predicts that, if every layer keeps its activations,
# they are the largest part of what each GPU holds. That script also passes
# `--checkpoint-activations` (full recompute: each layer keeps only its input and redoes
# its forward in the backward pass), and with it the model states are the larger part; the
# first figure shows both.
#
# **What you will do.** Train a tiny GPT for real on this CPU, measure what each step
# holds tensor by tensor, check the measurement against the analytic model the
# literature uses (ZeRO's 16 bytes per parameter for mixed-precision Adam; Korthikanti et al.'s
# 34·s·b·h + 5·a·s²·b bytes per layer for 16-bit activations), then use the same model on real GPUs.
#
# Every number below is either **measured** (from a real run in this kernel) or
# **predicted** (computed by `labkit.predict.estimate`); each cell says which.
#
# **Symbols and units** used from here on (the papers' own letters):
#
# | symbol | meaning |
# |---|---|
# | *s* | sequence length: tokens per sequence |
# | *b* | micro-batch size: sequences one device processes per step (*B* in Korthikanti et al.'s FLOP count) |
# | *h* | hidden size (width of the residual stream) |
# | *a* | attention heads |
# | *L* | transformer layers |
# | *V* | vocabulary size |
# | *Ψ* | number of parameters (ZeRO's letter) |
# | *K* | optimizer bytes per parameter (ZeRO: 12 for mixed-precision Adam: fp32 master weights, momentum, variance) |
# | *N_d* | data-parallel degree: how many GPUs share (ZeRO: shard) the model states |
# | *e*, *e_m* | bytes per activation element, bytes per dropout-mask element (*m* is micro-batches, as in 00) |
#
# B is a byte; counts are spelled out or written "bn" (billion); GB = 10⁹ B, GiB = 2³⁰ B.
# GPU makers' "GB" is not 10⁹ B: an A100 sold as "80 GB" holds 80 GiB (what `nvidia-smi` reports,
# in MiB), which is 85.9·10⁹ B. labkit's fit verdicts start from the true capacity the catalogue
# records (`Device.memory_bytes`; some judge against what torch can allocate, a little less), and
# the cells below print both figures for each card they use.

# %%
from labkit import hardware
from labkit.measure import measure_flops, measure_step, peak_step_bytes
from labkit.measure.activation_ledger import activation_ledger
from labkit.measure.compare import layer_comparison, memory_comparison, setup_for
from labkit.measure.state_conventions import measure_update_states
from labkit.predict import tables
from labkit.predict.budget_analogy import scaled_budget
from labkit.predict.bytes_per_param import STATE_CONVENTIONS
from labkit.predict.estimate import TrainingSetup, activation_bytes_per_layer, estimate_memory, training_flops
from labkit.references import failure_traces
from labkit.rig import data
from labkit.rig.model import GPTConfig, count_parameters
from labkit.rig.train import TrainConfig, Trainer, seed_everything
from labkit.shapes import ModelShape, model_shape
from labkit.storage import exercises as _exercises  # noqa: F401  (registers the 01.* exercises)
from labkit.teach import checks, plots

seed_everything(0)  # fixed seed and thread count: the checked numbers below are the same on every run
print("corpus:", f"{len(data.corpus()):,} characters,", data.vocab_size(), "distinct; first line:")
print(data.corpus().splitlines()[0])

# %% [markdown]
# The picture to keep in mind (predicted by `labkit.predict.estimate`): one GPU's share of
# GPT-3 175B in that layout, against an A100's true capacity, with every layer keeping its
# activations (the s x s attention scores included: Megatron-LM's 2021 kernels stored them,
# `attention="explicit"`) and with the script's `--checkpoint-activations` (`recompute="full"`). The
# same model on a single GPU is printed, not drawn: its bar would dwarf these.

# %%
gpt3 = model_shape("gpt3-175b")
a100 = hardware.gpu("A100-80GB")
print(f"{a100.name}: sold as {a100.memory_nominal_bytes / 1e9:.0f} GB, holds {a100.memory_bytes / 2**30:.1f} GiB "
      f"= {a100.memory_bytes / 1e9:.1f} GB (true capacity: fit verdicts use it)")
megatron = estimate_memory(TrainingSetup(gpt3, micro_batch=1, seq=2048, tp=8, pp=16, dp=8, attention="explicit"),
                           a100.memory_bytes, a100.name)
megatron_ckpt = estimate_memory(TrainingSetup(gpt3, micro_batch=1, seq=2048, tp=8, pp=16, dp=8, recompute="full",
                                              attention="explicit"), a100.memory_bytes, a100.name)
alone = estimate_memory(TrainingSetup(gpt3, micro_batch=1, seq=2048, attention="explicit"), a100.memory_bytes,
                        a100.name)
for label, est in (("tp8 pp16 dp8, activations kept", megatron),
                   ("tp8 pp16 dp8, --checkpoint-activations", megatron_ckpt)):
    print(f"{label}: {est.per_device_bytes['total'] / 1e9:.1f} GB per GPU, "
          f"{100 * est.activation_share:.0f}% of it activations (predicted)")
print(f"one GPU alone: {alone.per_device_bytes['total'] / 1e9:,.0f} GB, "
      f"{alone.per_device_bytes['total'] / a100.memory_bytes:.0f} times the card (predicted)")
assert megatron.activation_share > 0.5 > megatron_ckpt.activation_share  # the introduction's two claims
plots.memory_bars({"tp8 pp16 dp8, activations kept": megatron.per_device_bytes,
                   "tp8 pp16 dp8, --checkpoint-activations": megatron_ckpt.per_device_bytes},
                  capacity_bytes=a100.memory_bytes, capacity_label=a100.name, wrap=24,
                  title="GPT-3 175B: one GPU's share (predicted)")

# %% [markdown]
# ## 1 · Predict
#
# The tiny GPT below (its sizes are printed) trains in fp32 with AdamW, one character
# per token. **Which category holds the most bytes during a step: `"parameters"`,
# `"gradients"`, `"optimizer"` or `"activations"`?** Commit your guess before you run
# the next cells.

# %%
config = TrainConfig(model=GPTConfig(vocab_size=data.vocab_size()), batch_size=16)
shape = ModelShape.from_config(config.model)
s, b = config.model.seq_len, config.batch_size
print(f"s = {s}, b = {b}, h = {shape.hidden}, a = {shape.heads}, L = {shape.layers}, V = {shape.vocab}, "
      f"Ψ = {shape.params:,} parameters")

# %%
prediction = None  # e.g. "optimizer"

# %% [markdown]
# ## 2 · Measure: a real training run
#
# 300 steps of real training on the CPU (a progress bar shows while it runs; its
# output is not checked). The loss falls because the generated corpus has structure.

# %% tags=["nbval-ignore-output"]
trainer = Trainer(config)
losses = trainer.run(300, progress=True)

# %%
# trained fp32 losses print to one decimal: another CPU's kernels move them in the third or fourth digit
print(f"measured loss: step 1 {losses[0]:.1f}, step 300 {losses[-1]:.1f}; validation {trainer.eval_loss():.1f}")
assert losses[-1] < losses[0] / 2  # the loss falls
plots.loss_curve({"tiny GPT, fp32": losses})

# %% [markdown]
# Now one more real step, measured: parameters, gradients and optimizer states are
# summed over distinct storages; activations are every tensor autograd saved for the
# backward pass (seen through `saved_tensors_hooks`), each storage once.

# %%
step = measure_step(trainer)
measured = {"parameters": step.parameters, "gradients": step.gradients,
            "optimizer": step.optimizer, "activations": step.activations}
checks.reveal(prediction, measured, key="01.predict.largest_category")

# %%
for name, nbytes in measured.items():
    print(f"{name:12} {nbytes:>12,} bytes (measured)")

# %% [markdown]
# Over the step, memory rises and falls. torch's own `MemTracker` follows every
# tensor through the step: activations pile up in the forward pass and are freed in
# backward while gradients appear; **temporaries** (intermediate gradients) peak in
# backward. Activations and full gradients never coexist here: the previous step's
# gradients were freed (`zero_grad(set_to_none=True)`) before this forward pass.
# `other` is what lives outside the step, mostly the corpus's token ids (8 bytes
# each) that the batch loader keeps. The few bytes of activations left after backward are
# the loss and backward's seed gradient (the loss's gradient with respect to itself, 1.0),
# one fp32 number each (the ledger below prints them). (Measured, in bytes; the figure
# leaves `other` out.)

# %%
ledger = activation_ledger(trainer)
phases = ledger.phases
print(tables.text_table(["phase (measured)", *next(iter(phases.values()))],
                        [[p, *(f"{v:,}" for v in row.values())] for p, row in phases.items()]))
plots.memory_bars({p: {k: v for k, v in row.items() if k != "other"} for p, row in phases.items()},
                  unit=1e6, unit_name="MB (1e6 B)", wrap=10, title="One step, phase by phase (measured)")

# %% [markdown]
# MemTracker's activations after forward are more than the activations `measure_step`
# printed for the step before. Both are measured, and they count different things:
# `measure_step` counts the tensors autograd *saves for backward*; MemTracker files
# *every* tensor the forward pass created as an activation, including forward outputs
# no backward needs: the logits (cross-entropy saves its own log-softmax, not its
# input) and the loss. The ledger below measures each part on a real forward pass;
# the `assert` fails if they do not add up to the byte. (MemTracker's optimizer column
# also holds Adam's step counters, one 4-byte scalar per parameter tensor, which
# `measure_step` reports apart from the moments.)

# %%
print(tables.text_table(["activations, one step (measured)", "bytes"], [[k, f"{v:,}"] for k, v in ledger.rows()]))
assert ledger.saved == step.activations
assert ledger.after_forward == ledger.tracker_after_forward
print(f"left after backward (MemTracker): {ledger.tracker_after_backward} B = the loss "
      f"({ledger.unsaved_outputs['loss']} B) + backward's seed gradient ({ledger.seed_gradient} B)")
assert ledger.tracker_after_backward == ledger.unsaved_outputs["loss"] + ledger.seed_gradient

# %% [markdown]
# The same kind of step, storage by storage: `labkit.measure.timeline` records every tensor storage the step
# creates and frees and files it under the part it plays (an activation is what autograd saved; a gradient
# what became `p.grad`; everything else made during the step is a temporary). Activations rise through the
# forward pass, fall through the backward while the gradients arrive, and the optimizer step ends with the
# gradients freed (asserted). The vertical ticks mark the layers; the dashed line is the step's peak, the one
# `whole_step_peak` measures (the `assert`). Its `parameters` include the model's buffers (each layer's causal
# mask, printed), so they read a little above `measure_step`'s parameters. `labkit measure --full --snapshot
# FILE` writes the same record of a full-size step for PyTorch's memory_viz.

# %%
from labkit.measure import whole_step_peak  # noqa: E402
from labkit.measure.timeline import step_timeline  # noqa: E402
from labkit.teach.plots_timeline import timeline_plot  # noqa: E402

timeline = step_timeline(trainer)
print(timeline.summary())
buffers = sum(b.nbytes for b in trainer.model.buffers())
print(f"parameters {timeline.at_peak()['parameters']:,} B = measure_step's {step.parameters:,} + buffers {buffers:,}")
assert timeline.peak == whole_step_peak(trainer).peak
assert timeline.at_peak()["parameters"] == step.parameters + buffers
assert all(timeline.trends().values()), timeline.trends()  # rise in forward, fall in backward, gradients freed
timeline_plot(timeline, "One step of the tiny GPT, storage by storage (measured)")

# %% [markdown]
# ## 3 · Explain: the analytic model beside the measurement
#
# The model states follow ZeRO's accounting (Rajbhandari et al., SC 2020), here for fp32:
# AdamW holds 4 (weights) + 4 (gradients) + 8 (two moments) bytes per parameter, the
# same 16 as ZeRO's mixed-precision 2 + 2 + 12 (section 3.1; the bf16 run below). Activations
# follow Korthikanti et al. (2022), written with the element size *e* (4 bytes here)
# and the dropout-mask size *e_m* (1 byte: a bool mask):
# s·b·h·(16e + 2e_m) + a·s²·b·(2e + e_m) per layer. The `assert` fails if they disagree.

# %%
print(f"{shape.params:,} parameters (predicted from the shape), in "
      f"{sum(1 for _ in trainer.model.parameters())} tensors (counted)")
comparison = memory_comparison(step, setup_for(shape, config.batch_size, "fp32"))
print(comparison)
assert comparison.worst_error < 0.02

# %% [markdown]
# ### Where 34 and 5as/h come from, tensor by tensor
#
# Each operation that keeps a tensor is a named module of `labkit.rig.model`, so each
# saved byte has an owner. Per layer, with 16-bit activations (e = 2) and 1-byte masks:
#
# | module | what it keeps | bytes |
# |---|---|---|
# | `ln_1`, `ln_2` | the two LayerNorm inputs | 2sbh + 2sbh |
# | `attn.c_attn` | input of the QKV projection | 2sbh |
# | `attn.core.qk` | Q and K for QKᵀ | 4sbh |
# | `attn.core.softmax` | softmax output | 2as²b |
# | `attn.core.attn_drop` | dropout mask of the scores | as²b |
# | `attn.core.av` | dropout output and V | 2as²b + 2sbh |
# | `attn.c_proj` | input of the output projection | 2sbh |
# | `attn.resid_drop` | its dropout mask | sbh |
# | `mlp.c_fc` | input of the first MLP linear | 2sbh |
# | `mlp.act` | GeLU input (4h wide) | 8sbh |
# | `mlp.c_proj` | input of the second MLP linear | 8sbh |
# | `mlp.drop` | its dropout mask | sbh |
#
# That is 34·sbh + 5·as²b. The measured run is fp32, so each 2 becomes a 4: 66·sbh + 9·as²b.
# LayerNorm also keeps a mean and a reciprocal standard deviation per row, which
# the paper leaves out: the only place the two disagree.

# %%
layer = layer_comparison(step, setup_for(shape, config.batch_size, "fp32"))
print(layer)
plots.measured_vs_predicted({r.name: (r.measured, r.predicted) for r in layer.rows})

# %% [markdown]
# The same model in 16 bits (bf16 weights, gradients and activations; fp32 master
# weights and moments in the optimizer): its model states per parameter, measured
# between steps beside ZeRO's 16, and one layer beside the paper's own coefficients,
# 34 and 5 (plus the LayerNorm statistics the paper leaves out):

# %%
bf16 = Trainer(TrainConfig(model=config.model, precision="bf16-mixed"))
bf16.step()
step16 = measure_step(bf16)
print(f"model states: {step16.model_states / shape.params:.2f} bytes per parameter (measured)")
per_layer, paper = step16.activations_per_layer()[0], activation_bytes_per_layer(shape, s, b, act_bytes=2)
print(f"layer 0 keeps {per_layer:,} bytes (measured); 34sbh + 5as^2b = {paper:,.0f} (predicted)")
print(memory_comparison(step16, setup_for(shape, 16, "bf16-mixed")))

# %% [markdown]
# ### 16, 18 or 20 bytes per parameter?
#
# Planners disagree on mixed-precision Adam because they count different gradients.
# ZeRO counts 16-bit gradients: 2 + 2 + K with K = 12, so **16**. DeepSpeed's ZeRO-3
# memory estimator and Megatron-LM's distributed-optimizer documentation (bf16
# parameters) accumulate gradients in fp32: 2 + 4 + 12 = **18**. Megatron-LM's table
# gives **20** for fp16 parameters with fp16 gradients: the 16-bit gradient *and* its
# fp32 "main gradient" copy. The lab's own `MasterWeightAdamW` is that last case for
# a moment: it keeps 16 between steps, but when its AdamW update runs it holds the
# fp32 copy of every gradient beside the bf16 one. Below, a real bf16 step is read as
# the update starts, and each convention's tensors are summed from the measurement.
#
# The same states shard over *N_d* data-parallel GPUs with ZeRO (notebook 02): stage 1
# shards the optimizer states (4Ψ + 12Ψ/N_d bytes per GPU), stage 2 also the gradients
# (2Ψ + 14Ψ/N_d), stage 3 also the weights (16Ψ/N_d).

# %%
at_update = measure_update_states(Trainer(TrainConfig(model=config.model, precision="bf16-mixed")))
print(tables.text_table(
    ["convention", "formula (B per parameter, by tensor)", "total (B per parameter)", "measured"],
    [[c.name, c.formula, c.bytes_per_param, f"{at_update.holds(c):.2f}"] for c in STATE_CONVENTIONS]))
for c in STATE_CONVENTIONS:
    print(f"{c.name}: {c.source}")
print(f"between steps: {step16.model_states / shape.params:.2f} B per parameter; "
      f"as the update starts: {at_update.at_update:.2f} (measured)")
assert [at_update.holds(c) for c in STATE_CONVENTIONS] == [c.bytes_per_param for c in STATE_CONVENTIONS]
assert step16.model_states / shape.params == STATE_CONVENTIONS[0].bytes_per_param
assert at_update.at_update == STATE_CONVENTIONS[-1].bytes_per_param

# %% [markdown]
# **Two kernels, two accountings.** The paper counts 1-byte dropout masks, as fused
# GPU kernels keep. On the CPU, `F.dropout` keeps a full-width float mask; and a
# fused attention kernel (`scaled_dot_product_attention`) never stores the a·s²
# scores at all. The three variants below have the same parameters and the same data;
# what differs is printed beside each. The fused one is *not* the same computation:
# it runs without attention dropout (there are no stored scores to mask), so it gives
# up that regularisation; the residual and MLP dropout stay. Measured:

# %%
variants = {"bool masks, explicit attention": GPTConfig(vocab_size=data.vocab_size()),
            "float masks (F.dropout)": GPTConfig(vocab_size=data.vocab_size(), mask="float"),
            "fused attention (SDPA)": GPTConfig(vocab_size=data.vocab_size(), attention="fused")}
kept = {}
for label, cfg in variants.items():
    run = Trainer(TrainConfig(model=cfg))
    v = measure_step(run)
    kept[label] = v.activations_per_layer()[0]
    attn_drop = "yes" if hasattr(run.model.h[0].attn.core, "attn_drop") else "no"
    print(f"{label:31} {count_parameters(run.model):,} parameters, {cfg.mask:5} masks, attention dropout "
          f"{attn_drop:3}| layer 0 keeps {v.activations_per_layer()[0]:>9,} bytes (measured)")
assert kept["float masks (F.dropout)"] > kept["bool masks, explicit attention"] > kept["fused attention (SDPA)"]

# %% [markdown]
# FLOPs too: torch's `FlopCounterMode` counts every matrix multiply of a real step
# (forward and backward, no optimizer). Korthikanti et al. (2022) count a step without
# recompute as 72·B·s·L·h²·(1 + s/(6h) + V/(12·L·h)), with *B* the sequences in the batch
# (here one micro-batch, *b*). Narayanan et al. (SC 2021, equation 3) write 96 and
# V/(16·L·h) for a step that also recomputes the forward pass.

# %%
flops = measure_flops(trainer)
predicted_flops = training_flops(shape, s, b)
print(f"measured {flops.total:,} FLOPs, predicted {predicted_flops:,.0f}")
assert flops.total == predicted_flops

# %% [markdown]
# ## 4 · Scale: the same model on real models and real GPUs
#
# **Predict first:** for GPT-2 (its smallest size; the parameter count is printed under the table
# below) at micro-batch 8 and 1,024 tokens, do activations take more or less than half of the
# memory? And for a single GPU holding all of GPT-3 175B?

# %%
activations_more_than_half = {"gpt2": None, "gpt3 on one GPU": None}  # True or False

# %% [markdown]
# All predicted by `labkit.predict.estimate` (16-bit mixed precision; the s x s attention scores
# stored, `attention="explicit"`, as in GPT-2's and Megatron-LM's 2021 code, unless marked fused):

# %%
h100 = hardware.gpu("H100-SXM")
cases = {
    "GPT-2, b=8, s=1024": TrainingSetup(model_shape("gpt2"), micro_batch=8, seq=1024, attention="explicit"),
    "GPT-3 175B on one GPU": TrainingSetup(gpt3, micro_batch=1, seq=2048, attention="explicit"),
    "GPT-3, tp8 pp16 dp8": TrainingSetup(gpt3, micro_batch=1, seq=2048, tp=8, pp=16, dp=8, attention="explicit"),
    "  + seq. parallel, selective": TrainingSetup(gpt3, micro_batch=1, seq=2048, tp=8, pp=16, dp=8,
                                                  sp=True, recompute="selective", attention="explicit"),
    "Llama-2 7B, s=4096, fused": TrainingSetup(model_shape("llama2-7b"), seq=4096, attention="fused"),
    "  + ZeRO-3 over 8 GPUs": TrainingSetup(model_shape("llama2-7b"), seq=4096, attention="fused",
                                            zero_stage=3, dp=8),
}
scaled = {k: estimate_memory(v, h100.memory_bytes, h100.name) for k, v in cases.items()}
checks.reveal_claims(activations_more_than_half,
                     {"gpt2": scaled["GPT-2, b=8, s=1024"].activation_share > 0.5,
                      "gpt3 on one GPU": scaled["GPT-3 175B on one GPU"].activation_share > 0.5},
                     key="01.predict.activations_over_half")

# %%
print(f"on {h100.name}: true capacity {h100.memory_bytes / 2**30:.1f} GiB = {h100.memory_bytes / 1e9:.1f} GB "
      f"(sold as {h100.memory_nominal_bytes / 1e9:.0f} GB); table in GB = 1e9 B, predicted")
print(tables.estimate_table(scaled))
print(f"GPT-2 here is {cases['GPT-2, b=8, s=1024'].shape.params:,} parameters (predicted from its shape)")
dominate = {k: scaled[k].activation_share > 0.5 for k in cases}
assert dominate == {"GPT-2, b=8, s=1024": True, "GPT-3 175B on one GPU": False, "GPT-3, tp8 pp16 dp8": True,
                    "  + seq. parallel, selective": False, "Llama-2 7B, s=4096, fused": False,
                    "  + ZeRO-3 over 8 GPUs": True}, dominate  # the text below, row by row

# %% [markdown]
# Activations dominate when the model states are small or sharded (GPT-2, GPT-3
# in the tp8 pp16 dp8 layout, Llama-2 7B under ZeRO-3) and the batch and sequence are
# long; they are a minor part when one GPU must hold a whole large model's
# states, which is why sharding states (notebook 02) comes first and recompute
# (notebook 05) second. Selective recompute with sequence parallelism turns GPT-3's
# activations from the largest part into a minority of what each GPU holds (the
# `activ %` column). Where one GPU runs the whole step, the `step peak` column is the most
# the step holds at once (`labkit.predict.step_peak`): the total, plus the loss's fp32
# logits and their gradients or, in the optimizer step, every gradient's fp32 copy and
# AdamW's temporaries; the fit is judged on it there, and on the total for a sharded layout.

# %%
plots.memory_bars({k: v.per_device_bytes for k, v in scaled.items() if "one GPU" not in k},
                  capacity_bytes=h100.memory_bytes, capacity_label=h100.name, wrap=14,
                  title=f"Memory per device on {h100.name} (predicted)")

# %% [markdown]
# ## 5 · Break it: a Llama-2 7B full fine-tune on a "24 GB" card
#
# A popular wish: fine-tune all weights of Llama-2 7B on one RTX 4090 (sold as a
# "24 GB" card), in 16-bit mixed precision with Adam, at micro-batch 1, s = 2048, and with
# full recompute.
# **Predict first: how many GB do its model states and saved activations come to?** (The
# table's `total`; the step's peak, with the optimizer's temporaries, is printed beside it.)

# %%
predicted_gb_7b = None  # your guess, in GB (1e9 bytes)

# %% [markdown]
# The analytic model's answer (predicted):

# %%
rtx = hardware.gpu("RTX-4090")
wish = estimate_memory(TrainingSetup(model_shape("llama2-7b"), micro_batch=1, seq=2048, recompute="full",
                                     attention="fused"), rtx.memory_bytes, rtx.name)
states = wish.per_device_bytes["total"] - wish.per_device_bytes["activations"]
checks.reveal_number(predicted_gb_7b, wish.per_device_bytes["total"], "Llama-2 7B needs (predicted)",
                     key="01.predict.llama7b_gb")

# %%
print(f"{rtx.name}: true capacity {rtx.memory_bytes / 2**30:.1f} GiB = {rtx.memory_bytes / 1e9:.1f} GB "
      f"(sold as {rtx.memory_nominal_bytes / 1e9:.0f} GB)")
print(tables.estimate_table({"Llama-2 7B on RTX 4090": wish}))
print(f"short by {-wish.headroom_bytes / 1e9:.1f} GB: the model states alone are {states / 1e9:.0f} GB, "
      f"{states / rtx.memory_bytes:.1f} times the card")

# %% [markdown]
# The same failure at micro scale, measured. For the analogy to hold, the tiny GPT's
# "device" must be to its model states what the card is to Llama-2 7B's (both at
# 16 B per parameter: fp32 AdamW's 4 + 4 + 8 here, ZeRO's 2 + 2 + 12 there). So the
# budget is computed from the two ratios, not chosen; then the peak of a real step
# (`MemTracker`: model states, saved activations and temporaries at their common peak)
# is measured at three micro-batch sizes.

# %%
analogy = scaled_budget(rtx.memory_bytes, states, step.model_states)
device_bytes = analogy.budget_bytes
assert step.model_states > device_bytes and states > rtx.memory_bytes  # both models' states alone overflow
print(f"{rtx.name} / Llama-2 7B states: {analogy.real_ratio:.3f} (predicted states); "
      f"device / tiny GPT states: {analogy.micro_ratio:.3f} ({device_bytes:,} B / {step.model_states:,} B measured)")
for micro_batch in (16, 4, 1):
    run = Trainer(TrainConfig(model=config.model, batch_size=micro_batch))
    run.step()  # the first step creates the optimizer states
    peak = peak_step_bytes(run)
    verdict = "fits" if peak <= device_bytes else f"out of memory by {peak - device_bytes:,} B"
    assert peak > device_bytes  # the text below: no micro-batch fits
    print(f"micro-batch {micro_batch:2}: measured peak {peak:>11,} B on a {device_bytes:,}-B device: {verdict}")

# %% [markdown]
# No micro-batch rescues either model: shrinking the batch only trims activations, and
# the model states alone already exceed the device, the tiny GPT's as Llama-2 7B's.
# That is why notebook 02 shards the states (ZeRO) and notebook 04 moves them off the GPU.

# %% [markdown]
# ## 6 · Design: find a configuration that fits
#
# Pick a model, a GPU and a layout; the bar and the verdict follow (predicted; in GB, 1e9 bytes).
# Bad values (a data-parallel degree of 0, say) get a message, not a traceback.
#
# **Design task (checked):** train Llama-2 7B at sequence 2048 on RTX 4090s, with at
# least 2 GB to spare on each card (room for the allocator's reserve), using at most
# 8 cards. No single change gets there: section 5 showed which bytes are too many, and
# each control removes a different part of them. Press **Check my design**: it says
# whether the goal is met, and if not, what is still missing. Then, unchecked, try
# GPT-3 175B on H100s.

# %% tags=["nbval-ignore-output"]
from labkit.practice import design  # noqa: E402
from labkit.teach.widgets import MemoryPanel  # noqa: E402

memory_panel = MemoryPanel(model="llama2-7b", gpu="RTX-4090", seq=2048)
memory_panel.set_task(design.task("01"))

# %% [markdown]
# ## 7 · Meanwhile, hardware fails
#
# Memory is one storage challenge; keeping what is stored when a GPU dies is the
# other (notebook 06). Meta reports the interruptions of a 54-day period of Llama 3
# 405B's pre-training on 16,384 H100s. **Predict first: how many unexpected
# interruptions did the job have in those 54 days?**

# %%
predicted_interruptions = None  # a count

# %% [markdown]
# The published traces (data in `datasets/references.toml`, with their sources) give
# a failure rate per GPU-day; a job's expected failures grow linearly with its GPU
# count when failures are independent (predicted from the traces). OPT-175B's logbook
# gives no exact day count, so its rate rests on the approximate one noted in that file:

# %%
llama3 = next(t for t in failure_traces() if t.name == "Llama 3")
print(checks.reveal_number(predicted_interruptions, llama3.unexpected, "Llama 3, 54 days (published)", "", 1,
                           key="01.predict.llama3_interruptions",
                           exact=False, rel_tol=0.5))  # a published count nothing lets you derive: a band
print(f"{llama3.days:g} days on {llama3.gpus:,} GPUs; {100 * llama3.hardware_share:.0f}% of the unexpected "
      f"interruptions hardware; source: {llama3.source}")

# %%
counts = [8, 64, 512, 4096, 16384]
rates = {t.name: [t.failures_per_day(n) for n in counts] for t in failure_traces()}
print(tables.text_table(["GPUs", *rates], [[n, *(f"{r[i]:.2f}" for r in rates.values())]
                                          for i, n in enumerate(counts)]))
plots.failures_per_day(counts, rates)

# %% [markdown]
# ## 8 · Your own model
#
# Everything above measured the lab's tiny GPT. The same measurement works on any PyTorch
# model: `labkit.measure` finds its repeated layers itself (the largest `nn.ModuleList` of
# identical blocks), runs one real training step and files every saved tensor under the
# layer that saved it. Here is a model nobody in the lab wrote: a Llama-family model built by
# Hugging Face `transformers` from a small configuration (random weights, nothing
# downloaded), trained for one step on this CPU (**measured**), beside what labkit
# **predicts** for it. The prediction says what it assumes about the implementation: the
# attention kernel, the MLP's activation, the norm, whether the key/value cache is on, and
# the dropout masks (module `labkit.predict.activation_options`).

# %%
from labkit.measure.own_model import compare_model  # noqa: E402
from labkit.shapes.hf_models import small_spec  # noqa: E402

spec = small_spec("llama", layers=2, hidden=64, heads=4, kv_heads=2, ffn=128, vocab=96)
report = compare_model(spec, batch=2, seq=32, precision="bf16-mixed", attention="sdpa", timed=False)
print(report)
assert all(measured == predicted for _, measured, predicted in report.rows())  # every category and layer, exact

# %% [markdown]
# The model states follow ZeRO's 16 bytes per parameter, and the activations, layer by
# layer, follow the estimate once it knows how this model is written: grouped-query
# attention (2 key/value heads for 4 query heads), a SwiGLU MLP, and transformers' RMSNorm,
# which works in fp32 even in a bf16 model. The whole-step peak is **measured** over the
# forward pass, the backward pass and the optimizer step; its prediction
# (`labkit.predict.step_peak`) adds the temporaries to the model states and activations (the
# loss's fp32 logits and their gradients, AdamW's per-tensor scratch) and names the phase
# where the peak falls.
#
# **Point the lab at a real model.** A transformers-style `config.json` is enough: labkit
# reads it offline (GPT-2, Llama, Mistral and Qwen2 families) and gives the shape the
# estimates of this notebook use. `datasets/hf_configs/` ships a few published ones, each
# with its source; the parameter count below is **predicted** by labkit and **counted** by
# transformers on the `meta` device (shapes only, no memory):

# %%
from labkit.predict.estimate import TrainingSetup, estimate_memory  # noqa: E402
from labkit.shapes.hf_config import from_config, shipped_configs  # noqa: E402
from labkit.shapes.hf_models import build_model, count_parameters  # noqa: E402

mistral = from_config(shipped_configs()["mistral-7b"])
print(f"{mistral.shape.name}: labkit {mistral.shape.params:,} parameters, "
      f"transformers {count_parameters(build_model(mistral, device='meta')):,}")
assert mistral.shape.params == count_parameters(build_model(mistral, device="meta"))
print(f"source: {mistral.source}")
setup = TrainingSetup(mistral.shape, micro_batch=1, seq=4096, precision="bf16-mixed", attention="fused")
est = estimate_memory(setup)
print(f"one GPU, micro-batch 1, 4,096 tokens, bf16-mixed, fused attention: "
      f"{est.per_device_bytes['total'] / 1e9:,.1f} GB (predicted; GB = 1e9 B)")

# %% [markdown]
# From a terminal, the same with your own file (the path is where your model's `config.json`
# lives; a shipped name such as `mistral-7b` works too):
#
# ```
# labkit estimate --hf-config path/to/config.json --seq 4096 --gpu h100
# labkit measure  --hf-config path/to/config.json --layers 2 --batch 2 --seq 64
# ```
#
# `labkit measure` builds the model with random weights, keeps its widths but only
# `--layers` of its layers if you ask (a 7-billion-parameter model does not fit a laptop's
# memory for training), runs one real step on the CPU (or on a CUDA GPU when there is one)
# and prints measured beside predicted, per category and per layer.

# %% [markdown]
# ## 9 · Check yourself
#
# Replace each `None` with your number and run the cell; the checker computes the
# right answer with labkit's own model. Bytes per parameter follow ZeRO's convention
# (16-bit gradients, the 16 of the table above); Nd is *N_d*, Psi is *Ψ*.

# %%
checks.check("01.bytes_per_param", None)

# %%
checks.check("01.gpt3_layer_gb", None)

# %%
checks.check("01.zero_stage", None)

# %%
checks.check("01.mtbf_hours", None)

# %% [markdown]
# **Reasoning across results.** The next answer is in no single table: put two results
# together. Start from the design panel's starting setting (Llama-2 7B, bf16-mixed,
# micro-batch 1, s = 2048, no recompute, ZeRO stage 0, one GPU; set its controls back if
# you changed them): it prints the total and the activations' share. Then ask which of
# the four categories grow with the micro-batch (the introduction and section 5 say
# which). Answer in GB (10⁹ B).

# %%
from labkit.practice import reasoning  # noqa: E402, F401 - importing it registers the reasoning exercises

checks.check("01.reason.batch8_extra_gb", None)

# %% [markdown]
# **Coding exercise.** Write the heart of section 3 yourself: a function that returns the
# bytes of parameters, gradients and optimizer states of a model with `n_params`
# parameters trained with AdamW, for `precision` `"fp32"` or `"bf16-mixed"` (16-bit
# weights and gradients; the optimizer keeps fp32 master weights and Adam's two fp32
# moments), as a dict with the keys `"parameters"`, `"gradients"` and `"optimizer"`.
# The check trains a real tiny GPT for one step in each precision, at two sizes, and
# compares your bytes with what the step measurably holds, category by category.

# %%
from labkit import practice  # noqa: E402


def state_bytes(n_params, precision):
    raise NotImplementedError  # your code here


practice.check_code("01.code.state_bytes", state_bytes)

# %% [markdown]
# **Handing in.** Every answer, committed prediction and check result is appended as you go to
# `labkit-journal.jsonl` beside this notebook, so a kernel restart loses nothing. To hand them in,
# run `checks.export_answers("answers-01.json", student="your name", notebook="01")` in a new
# cell: it writes every try in order with its verdict, and a summary scored by your committed guesses.
