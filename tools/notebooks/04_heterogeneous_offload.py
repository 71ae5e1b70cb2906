# %% [markdown]
# # 04 · Heterogeneous storage: offload to DRAM and SSD
#
# **Why it matters.** GPU memory is fast but small; host DRAM and NVMe SSDs hold several
# and tens of times more (the catalogue's ratios are printed below), behind a link (PCIe)
# tens of times slower than the GPU's own memory. The slow tiers are usable only if every
# transfer can be planned ahead and overlapped with compute; section 2 asks whether
# training's access pattern allows that. vDNN (Rhu et al., MICRO 2016) moves activations
# out in the forward pass
# and back before backward; SwapAdvisor (ASPLOS 2020) searches which to move;
# ZeRO-Offload (ATC 2021) keeps the optimizer on the CPU; ZeRO-Infinity (SC 2021) puts
# model states on NVMe; FlashNeuron (FAST 2021) and Mobius (ASPLOS 2023) use SSDs and
# DRAM on commodity machines.
#
# Below, the tiny GPT runs against a **budgeted device** (a capacity scaled so that it
# feels what a real model feels on a real GPU); offload writes real bytes to real files.
# Figures at scale are predicted by labkit's simulator (`labkit.sim`).
#
# Units: GPU capacities are the true ones (an "80 GB" A100 holds 80 GiB = 85.9e9 B, the
# catalogue's `memory_bytes`); GB means 1e9 bytes, GiB 2**30; "B" is bytes, "bn" billions.
# Symbols, as in notebook 00's table: s is the sequence length, b the micro-batch size, h the
# hidden size.

# %%
from labkit import hardware
from labkit.offload import exercises as _exercises  # noqa: F401  (registers the 04.* exercises)
from labkit.offload import flashneuron, infinity_scale, mobius, swap_sweep, trends, zero_infinity, zero_offload
from labkit.offload.budget import DeviceOutOfMemory, budgeted_step, model_state_bytes, scaled_capacity
from labkit.offload.trace import repeats, trace_iterations, trace_step
from labkit.offload.vdnn import Offloader, OffloadPolicy, offloaded_step
from labkit.predict import offload_model
from labkit.references import headline
from labkit.rig.model import GPTConfig
from labkit.rig.train import TrainConfig, Trainer, parameters_equal, seed_everything
from labkit.shapes import model_shape
from labkit.teach import checks, plots

seed_everything(0)
config = TrainConfig(model=GPTConfig(vocab_size=35, d_model=128, n_layer=4, n_head=4), batch_size=16)
tiers = hardware.load_catalogue()
a100 = hardware.gpu("A100-80GB")
print(f"{a100.name}: {a100.memory_bytes / 2**30:.0f} GiB = {a100.memory_bytes / 1e9:.1f} GB at "
      f"{a100.memory_bandwidth / 1e9:,.0f} GB/s (catalogue)")
for t in tiers.tiers:
    print(f"{t.name}: {t.capacity_bytes / 1e9:,.0f} GB at {t.read_bandwidth / 1e9:.2f} GB/s read, "
          f"{t.capacity_bytes / a100.memory_bytes:.1f}x the A100's capacity (catalogue)")
pcie4 = hardware.link("pcie4-x16")
print(f"PCIe 4 x16: {pcie4.bandwidth / 1e9:.0f} GB/s per direction, "
      f"{a100.memory_bandwidth / pcie4.bandwidth:.0f}x slower than the A100's memory (catalogue)")

# %% [markdown]
# ## 1 · Break it first: a device too small
#
# The tiny GPT (4 layers, hidden 128, batch 16 × 64 characters) gets a device as tight
# as an A100-40GB is for GPT-2 XL: the capacity is scaled so that the model states take
# the same share of it (16 bytes per parameter, predicted). The step runs for real; the
# budget counts every saved tensor as autograd keeps it.

# %%
trace = trace_step(Trainer(config))
states = model_state_bytes(Trainer(config).model)
capacity = scaled_capacity("A100-40GB", model_shape("gpt2-xl").params, states)
m = config.model
print(f"tiny GPT: {m.n_layer} layers, hidden {m.d_model}, batch {config.batch_size} x {m.seq_len} characters")
print(f"model states {states:,} B + activations {trace.total_bytes:,} B; device capacity {capacity:,} B "
      f"(states take {100 * states / capacity:.0f}% of it, as GPT-2 XL's take of an A100-40GB)")
try:
    budgeted_step(Trainer(config), capacity)
except DeviceOutOfMemory as err:
    print(f"DeviceOutOfMemory: {err}")

# %% [markdown]
# ## 2 · Does the pattern repeat?
#
# **Predict:** the first iteration saves a sequence of tensors (module, shape, dtype,
# bytes). Will iterations 2 and 3 save exactly the same sequence?

# %%
predicted_repeats = None  # True or False (or "yes" / "no")

# %%
traces = trace_iterations(Trainer(config), steps=3)
print(checks.reveal_claims({"the same sequence in iterations 2 and 3": predicted_repeats},
                           {"the same sequence in iterations 2 and 3": repeats(traces)},
                           key="04.predict.same_sequence"))

# %%
print(f"{len(traces[0].entries)} saved tensors per iteration, {traces[0].total_bytes:,} bytes; "
      f"identical in all 3 iterations: {repeats(traces)} (measured)")
for e in traces[0].entries[:6]:
    print(f"  #{e.index:<3} {e.module:28} {str(tuple(e.shape)):18} {e.nbytes:>10,} B  kept for {e.lifetime} events")

# %% [markdown]
# ## 3 · vDNN: offload in forward, prefetch in backward
#
# With the trace as the plan, labkit's `Offloader` moves every saved activation out as it
# is saved, to a DRAM pool or to real files on disk, and a background thread reads them
# back in backward order, ahead of use. **Predict:** does the step now fit, and do the
# parameters after the step differ from those the same step gives without offload? (Every
# step updates the parameters; the question is whether offload makes them come out different.)

# %%
predicted_fits = None  # True or False (or "yes" / "no")
predicted_differ = None  # differ from the plain run's after the step? True or False (or "yes" / "no")

# %%
results = {}
for store in ("dram", "disk"):
    run = Trainer(config)
    with Offloader(run.model, store, policy=OffloadPolicy("all"), trace=trace, capacity=capacity) as off:
        loss = offloaded_step(run, off)
    results[store] = (off, run, loss)
plain = Trainer(config)
plain_loss = plain.step()
assert all(parameters_equal(plain.model, r[1].model) for r in results.values())
print(checks.reveal_claims({"the step fits": predicted_fits,
                            "the parameters differ from the plain run's": predicted_differ},
                           {"the step fits": all(r[0].peak <= capacity for r in results.values()),
                            "the parameters differ from the plain run's":
                                not all(parameters_equal(plain.model, r[1].model) for r in results.values())},
                           key="04.predict.fits_and_changes"))

# %%
for store, (off_store, _run, _loss) in results.items():
    print(f"{store}: peak within the {capacity:,} B capacity: {off_store.peak <= capacity}; offloaded "
          f"{off_store.stats.bytes_offloaded:,} B (= the trace's {trace.total_bytes:,} B)")
assert plain_loss == results["dram"][2] == results["disk"][2]  # bit for bit
print(f"losses: plain {plain_loss:.2f}, dram {results['dram'][2]:.2f}, disk {results['disk'][2]:.2f} (equal bit for "
      "bit, asserted; printed to 2 decimals: a loss's last digits differ between CPUs)")
print("parameters after the step are bit-identical to the plain run's, with DRAM and with disk offload")

# %% [markdown]
# What it cost (timing on this CPU, so not checked): the peak (it depends on how far ahead
# the prefetch thread got), and how many prefetches arrived late (a stall).

# %% tags=["nbval-ignore-output"]
for store, (off, _, _) in results.items():
    print(f"{store}: peak {off.peak:,} B; {off.stats.bytes_written:,} B written, {off.stats.bytes_read:,} B read, "
          f"{off.stats.stalls} stalls of {off.stats.tensors_offloaded} reads")

# %% [markdown]
# Is the simulator that predicts offload for real GPUs right? It can be checked on the one
# machine where both run: measure this machine's memory-copy and disk bandwidth and each
# layer's compute time, build a simulated machine from them, and replay vDNN's plan on the
# same trace. The check uses a smaller calibration model than section 3's (2 layers,
# d_model 64, s = 32, b = 4: `offload.calibrate.MODEL`), the same trace for the real and the
# simulated run. Bytes moved must agree exactly:

# %%
from labkit.offload.calibrate import MODEL, calibrate

cal = calibrate(repeats=7)  # 7 paired plain/offloaded steps per store: the timing below is their median and range
print("calibration model (offload.calibrate.MODEL):", ", ".join(f"{k} {v}" for k, v in MODEL.items()) + "; batch 4")
for r in cal.rows:
    print(f"{r.store}: {r.measured_bytes:,} B moved out and back (measured) = {r.simulated_bytes:,.0f} B (simulated)")
assert all(r.measured_bytes == r.simulated_bytes for r in cal.rows)

# %% [markdown]
# Time and peak memory, measured beside simulated (wall clock, so not checked). The
# replay has terms for the copies, the files and the compute; it has none for vDNN's own
# software: the saved-tensor hooks, the bookkeeping per tensor and the hand-off to the
# prefetch thread, which competes with compute for this machine's cores. That cost is
# **measured** here with the same offloader whose copies move nothing (`offload.overhead`),
# and a second replay adds it to each offloaded tensor's forward and backward.
#
# What you will see: the measured added time is the median of 7 pairs (a plain step, then an
# offloaded one on the same batch and weights), with the lowest and the highest pair in brackets.
# This model's plain step is short (its time is printed first), so one slow spell of a shared
# machine (another program taking the core for a moment) that falls on the plain step of a pair
# makes that pair's difference negative, and one that falls on the offloaded step makes it far too
# large. The narrower the brackets, the more the median says; on a busy machine they are wide, a
# negative median is possible, and a gap between measured and replayed means something only where it
# is larger than the brackets. Every figure here is measured or replayed from measurements, so none
# is checked.

# %% tags=["nbval-ignore-output"]
print(f"plain step of the calibration model: {1e3 * sum(o.fwd_s + o.bwd_s for o in cal.ops):.1f} ms "
      "(forward + backward, median per layer, measured)")
print(f"this machine: memcpy {cal.copy_bps / 2**30:.2f} GiB/s, {1e3 * cal.file_s:.2f} ms per offload file; "
      f"{cal.disk.summary()}")
sw = cal.software
print(f"vDNN's software cost, no bytes moved (measured): {1e3 * sw.forward_s:.1f} ms forward + "
      f"{1e3 * sw.backward_s:.1f} ms backward for {sw.tensors} tensors ({1e3 * sw.per_tensor_s:.2f} ms each)")
for r in cal.rows:
    low, high = r.measured_added_range_s
    print(f"{r.store}: added {1e3 * r.measured_added_s:.1f} ms measured ({1e3 * low:.1f} to {1e3 * high:.1f} over "
          f"{r.pairs} pairs); simulated {1e3 * r.simulated_added_s:.1f} ms, "
          f"{1e3 * r.calibrated_added_s:.1f} ms with the software cost; peak {r.measured_peak_bytes:,} B measured, "
          f"{r.simulated_peak_bytes:,.0f} B simulated")

# %% [markdown]
# ## 4 · vDNN at scale: when does the copy hide behind compute?
#
# Llama-2 7B, one layer's saved activations (s = 4,096, b = 1, 16-bit, fused attention)
# offloaded over PCIe 4 from an A100 while the next layer computes (predicted). **Predict:**
# does the A100 wait for PCIe at micro-batch 1?

# %%
predicted_stall = None  # True or False (or "yes" / "no")

# %%
from labkit.offload.vdnn import predict_vdnn, stall_seconds
from labkit.predict.estimate import activation_bytes_per_layer, forward_flops

llama = model_shape("llama2-7b")
stalls, vdnn_runs = {}, {}
for b in (1, 4):
    per_layer = activation_bytes_per_layer(llama, 4096, b, attention="fused")
    flops = (forward_flops(llama, 4096, b) - 2 * 4096 * b * llama.hidden * llama.vocab) / llama.layers
    tl = predict_vdnn(per_layer, flops, llama.layers, gpu="A100-80GB")
    stalls[b] = stall_seconds(tl)
    vdnn_runs[b] = (per_layer, tl)
print(checks.reveal_claims({"the A100 waits for PCIe at micro-batch 1": predicted_stall},
                           {"the A100 waits for PCIe at micro-batch 1": stalls[1] > 0}, key="04.predict.pcie_stall"))

# %%
for b, (layer_bytes, timeline) in vdnn_runs.items():
    print(f"b={b}: {layer_bytes / 1e9:.2f} GB per layer over {hardware.link('pcie4-x16').name}; step "
          f"{timeline.makespan:.2f} s of which {stall_seconds(timeline):.2f} s waiting for copies (predicted)")
vdnn_trends = trends.vdnn_scaling({b: (per, t.makespan, stall_seconds(t)) for b, (per, t) in vdnn_runs.items()})
assert all(vdnn_trends.values()), vdnn_trends  # the text below: four times everything, a wait at both batches
plots.gantt(tl, title="vDNN, Llama-2 7B, b=4, A100 over PCIe 4 (predicted)")

# %% [markdown]
# A layer's forward grows with b·s·h² while its activations grow with b·s·h: both scale
# with the batch, so the ratio is set by h and by the link, not by the batch (the two rows
# above: four times the batch, four times the bytes, the step and the wait). On PCIe 4 a
# 7B model's activations take longer to move than the A100 takes to compute the next layer,
# so it waits at both batches: vDNN must choose *which* tensors to move. That is
# SwapAdvisor's question.
#
# ## 5 · SwapAdvisor: a genetic search over what to swap
#
# GPT-2 medium (s = 1,024, b = 4) on an RTX 4090: the model states (16 B per parameter)
# stay on the card, and the budget leaves the layer activations 1/r of the room they
# need without offload, r the **oversubscription** (at 1.05 they need 5% more room than
# they get, at 3 three times as much). Three planners, each plan scored by the same
# simulator (predicted): a genetic search (SwapAdvisor, Huang et al., ASPLOS 2020: which activations to swap,
# how early to prefetch each, whether the next layer waits for the copy), run with five
# seeds because it is random; a greedy rule (swap the largest activations first until
# the peak fits); and vDNN's rule (swap everything). **Predict:** at r = 1.5, how much
# slower than compute alone is the search's median plan, in per cent?

# %%
predicted_search_overhead = None  # per cent

# %%
gpt2m = model_shape("gpt2-medium")
points = swap_sweep.sweep(gpt2m, 1024, 4, "RTX-4090", population=10, generations=15)  # the search's size
n_seeds = len(points[0].ga)
at_15 = next(p for p in points if p.ratio == 1.5)
print(checks.reveal_number(predicted_search_overhead, 100 * at_15.ga_median,
                           "Search's median slowdown at r = 1.5 (predicted)", "%", 1, key="04.predict.search_overhead"))
ratios = [p.ratio for p in points]

# %%
print(f"slowdown over compute alone (predicted); search: best / median / worst of {n_seeds} seeds")
for p in points:
    print(f"r = {p.ratio:4.2f} (budget {p.capacity_bytes / 1e9:5.2f} GB): search {100 * min(p.ga):5.1f} / "
          f"{100 * p.ga_median:5.1f} / {100 * max(p.ga):5.1f}%, greedy {100 * p.greedy:5.1f}%, "
          f"vDNN {100 * p.vdnn:5.1f}%; search beats greedy in {p.ga_beats_greedy} of {n_seeds} seeds")
for p in points[1::2]:
    print(f"r = {p.ratio:4.2f}: ops swapped (of {gpt2m.layers} attention and {gpt2m.layers} MLP ops): greedy "
          f"{p.greedy_swaps['attn']} attention + {p.greedy_swaps['mlp']} MLP; search, seed by seed: "
          + ", ".join(f"{g['attn']} + {g['mlp']}" for g in p.ga_swaps))
plots.line({"search, best seed": [100 * min(p.ga) for p in points],
            "search, median": [100 * p.ga_median for p in points],
            "search, worst seed": [100 * max(p.ga) for p in points],
            "greedy, largest first": [100 * p.greedy for p in points],
            "vDNN, swap all": [100 * p.vdnn for p in points]},
           "oversubscription r", "slowdown over compute (%, predicted)",
           "Three swap planners, GPT-2 medium on an RTX 4090", x=ratios)
swap_trends = trends.swap_planners(points)
assert all(swap_trends.values()), swap_trends  # each claim of the text below, read off these rows

# %% [markdown]
# Read the rows. Just over budget, the seeds disagree by more than the search's lead: the
# worst seed's plan is slower than the greedy rule's, so one run of the search can lose to
# a rule that needs no search at all. From 1.1x to 2x every seed beats the greedy
# rule: largest first means attention ops only (their saved s² scores make them the
# biggest, and their copies take far longer than their compute), while most seeds' plans
# swap MLP ops too, with less to move per op, and every plan chooses per op how early to
# prefetch and whether the next op waits for the copy. At 3x the choice narrows: most activations must
# go, the link sets the time, the search's median is within a few points of the greedy
# rule, and every plan is several times slower than compute. vDNN's rule pays the full
# price at every r. The search here is small (ten plans, fifteen generations, so that it
# runs in seconds); SwapAdvisor also searches the operator order and the memory layout,
# which this model fixes.

# %% [markdown]
# ## 6 · ZeRO-Offload: the optimizer on the CPU
#
# The GPU keeps the 16-bit weights (2 bytes per parameter); the 16-bit gradients go to the
# CPU as backward produces them (Ren et al., ATC 2021, section 4), and the CPU side keeps
# them beside the fp32 master weights and Adam's moments (2 + 12) and runs the Adam step.
# Per step the link carries the gradients down and the updated weights up. **Predict:** how many bytes
# per parameter cross the link per step?

# %%
predicted_bytes_per_param = None

# %%
run = zero_offload.run_zero_offload(TrainConfig(model=config.model, precision="bf16-mixed", batch_size=8), 3)
moved = run.bytes_down[-1] + run.bytes_up[-1]
assert moved == run.predicted_bytes_per_step
print(checks.reveal_number(predicted_bytes_per_param, moved / run.params, "Bytes per parameter (measured)", "", 1,
                           key="04.predict.bytes_per_param",
                           mistakes={"one direction only: the updated weights come back up too": 2,
                                     "the optimizer states (12 B) crossing: they stay on the CPU, where Adam runs": 12,
                                     "all 16 bytes of model states crossing": 16}))
reference = Trainer(TrainConfig(model=config.model, precision="bf16-mixed", batch_size=8))
assert reference.run(3) == run.losses

# %%
print(f"Psi = {run.params:,}; per step {run.bytes_down[-1]:,} B down + {run.bytes_up[-1]:,} B up "
      f"(measured) = {moved / run.params:.0f} bytes per parameter; predicted {run.predicted_bytes_per_step:,} B")
print("losses equal plain mixed-precision training bit for bit (same math, another place)")

# %%
print("largest model on one V100-32GB (32 GiB; predicted by labkit; the last row is the paper's)")
for row in zero_offload.largest_model_table():
    print(f"  {row['params'] / 1e9:6.1f} bn parameters  {row['setup']}")

# %% [markdown]
# ZeRO-Offload runs on ZeRO stage 2, which does not partition the parameters: every GPU
# keeps all of the 16-bit weights, and only the host side (gradients and fp32 states) is
# split among the GPUs. Over ZeRO stage 3 the weights are split too. The two are distinct
# strategies in `labkit.predict.offload_model`, the one source the cost model (notebook 07) and the
# advisor (notebook 09) read:

# %%
llama70 = model_shape("llama2-70b")
for m in (offload_model.ZERO_OFFLOAD, offload_model.ZERO3_CPU_OFFLOAD):
    weights = m.gpu_bytes_per_param(8) * llama70.params
    print(f"{m.name:18} Llama-2 70B on 8 GPUs: {weights / 1e9:6.1f} GB of "
          f"16-bit weights per GPU ({'within' if weights < a100.memory_bytes else 'beyond'} an A100-80GB's "
          f"{a100.memory_bytes / 1e9:.1f} GB before any activation), "
          f"{m.host_bytes_per_param * llama70.params / 8 / 1e9:5.1f} GB in host DRAM "
          f"per GPU; {m.link_bytes_per_param():.0f} B per parameter over PCIe per step ({m.source})")

# %% [markdown]
# So ZeRO-Offload alone cannot train a 70B model on 80 GB GPUs: stage 2 leaves every GPU a
# whole copy of the 16-bit weights. The paper's own runs fit their GPUs (a 13B model on one
# 32 GB V100, above); a model this size needs the weights split too, which is what offloading
# over ZeRO stage 3 does.

# %% [markdown]
# ## 7 · ZeRO-Infinity: model states on NVMe, for real
#
# The same tiny GPT with its 16-bit weights, fp32 master weights and Adam moments in
# **real files** on this machine's disk, streamed block by block with a prefetch thread
# (block i+1 read while block i computes), the Adam step done block by block and written
# back. Bytes per step are exact; the bandwidth is this disk's, measured in the same run.

# %%
inf = zero_infinity.run_zero_infinity(TrainConfig(model=config.model, precision="bf16-mixed", batch_size=8), 2)
print(f"per step: read {inf.bytes_read[-1]:,} B (predicted {inf.predicted['read']:,}), "
      f"wrote {inf.bytes_written[-1]:,} B (predicted {inf.predicted['write']:,})")
assert inf.bytes_read[-1] == inf.predicted["read"] and inf.bytes_written[-1] == inf.predicted["write"]
assert inf.losses == Trainer(TrainConfig(model=config.model, precision="bf16-mixed", batch_size=8)).run(2)
print(f"losses {', '.join(f'{x:.1f}' for x in inf.losses)}: bit for bit the numbers of training in memory (asserted; "
      "printed to 2 digits: a bf16 loss's last digits differ between CPUs)")

# %% [markdown]
# Per parameter, this run reads and writes fewer bytes than the paper's accounting, which
# holds 20 bytes of model states per parameter on NVMe (both printed below). The difference
# is a list of named terms (`offload_model.difference`, the paper's accounting against this run's):

# %%
lab, paper = offload_model.ZERO_INFINITY_LAB, offload_model.ZERO_INFINITY
f_b = inf.block_params / inf.params
print(f"Psi = {inf.params:,} parameters, {100 * f_b:.0f}% of them in the transformer blocks (f_b)")
print(f"measured per parameter per step: read {inf.bytes_read[-1] / inf.params:.2f} B, "
      f"wrote {inf.bytes_written[-1] / inf.params:.2f} B")
assert inf.bytes_read[-1] == round(lab.nvme_read_bytes_per_param(f_b) * inf.params)
assert inf.bytes_written[-1] == round(lab.nvme_write_bytes_per_param(f_b) * inf.params)
assert all(lab.bytes_per_param(w, 1, f_b) < paper.bytes_per_param(w, 1, f_b) for w in ("nvme_read", "nvme_write"))
for where, label in (("nvme", "held on NVMe"), ("nvme_read", "read per step"), ("nvme_write", "written per step")):
    diff = offload_model.difference(paper, lab, where, f_b)
    terms = "; ".join(f"{name} {'+' if b > 0 else ''}{b:.2f}" for name, b in diff)
    print(f"{label}: paper {paper.bytes_per_param(where, 1, f_b):.2f} B/param, this run "
          f"{lab.bytes_per_param(where, 1, f_b):.2f}; paper minus run: {terms}")

# %% [markdown]
# The disk's speed (timing, so not checked). Expect the streaming figures well below the raw ones:
# the raw disk is measured with large blocks written and read back to back, while the streamed
# states are one file for each kind of state of each block (16-bit weights, master weights, the two
# moments), far smaller than those blocks, so the fixed cost of each file and call weighs on every
# read and write; reads and writes also overlap and share the disk,
# and the prefetch thread shares this machine's cores with compute (more so on a busy machine).

# %% tags=["nbval-ignore-output"]
print(f"raw disk ({inf.raw.method}): write {inf.raw.write_bps / 2**30:.2f} GiB/s, "
      f"read {inf.raw.read_bps / 2**30:.2f} GiB/s")
print(f"streaming achieved: read {inf.achieved_read_bps / 2**30:.2f} GiB/s ({100 * inf.read_ratio:.0f}% of raw), "
      f"write {inf.achieved_write_bps / 2**30:.2f} GiB/s ({100 * inf.write_ratio:.0f}%)")

# %% [markdown]
# The gradients never reach this run's disk: a block's Adam step runs as soon as its
# backward is done, so its 16-bit and fp32 gradients live in memory for one block at a
# time. The paper also loads the 16-bit weights a third time for recompute; here recompute
# and backward share one fetch, and the outer layers (embeddings, final norm) are fetched
# once per step. One term runs the other way (the negative one): this run writes each block's
# updated 16-bit weights back to its file after the block's Adam step, bytes the paper's
# accounting, as `offload_model.ZERO_INFINITY` lists its terms, does not write. At scale this
# lab uses the paper's 20 bytes:

# %%
fit = infinity_scale.dgx2_fit()
print(f"one DGX-2 ({fit.gpus} GPUs of {fit.gpu_memory_bytes / fit.gpus / 2**30:.0f} GiB, "
      f"{fit.dram_bytes / 1e12:.1f} TB DRAM, {fit.nvme_bytes / 1e12:.0f} TB NVMe) at "
      f"{fit.bytes_per_param} bytes of states per parameter (predicted):")
print(f"  states in GPU memory: {fit.params_gpu_only / 1e9:,.0f} bn parameters; in DRAM: "
      f"{fit.params_dram / 1e9:,.0f} bn; on NVMe: {fit.params_nvme / 1e12:.1f} trillion")
print(f"  published: {fit.published_claim}")

# %% [markdown]
# Each predicted figure counts the model states alone, so each is an upper bound: the
# activation checkpoints and one layer's working memory need room too. That is one reason the
# NVMe bound sits above the trillion the paper fine-tuned on the same node (a size it ran, not a
# ceiling it measured).

# %% [markdown]
# ## 8 · SSDs and DRAM on commodity machines: FlashNeuron and Mobius (predicted)
#
# FlashNeuron (Bae et al., FAST 2021) sends activations from the GPU straight to an SSD
# and chooses offline which tensors to send by one rule: **offload only what hides behind
# compute**. Here the rule adds a tensor to the offloaded set (largest first) only if the
# simulated iteration stays within 10% of compute alone, on the paper's card, a 16 GB V100
# (16 GiB), with one PCIe 4 NVMe SSD. **Predict:** how many times larger a batch does the rule allow for
# GPT-2 medium at s = 1,024?

# %%
predicted_batch_ratio = None

# %%
fn = flashneuron.compare(gpt2m, 1024)
print(checks.reveal_number(predicted_batch_ratio, fn.batch_ratio, "Batch ratio under the rule (predicted)", "x", 1,
                           key="04.predict.batch_ratio"))
h = flashneuron.hiding(gpt2m, 1024, fn.batch_no_offload)

# %%
print(f"FlashNeuron's rule (slack {fn.slack:.0%}), GPT-2 medium on a {fn.capacity_gb * 1e9 / 2**30:.0f} GiB V100 "
      f"with one NVMe SSD: "
      f"batch {fn.batch_no_offload} without offload, {fn.batch_offload} with it ({fn.batch_ratio:.1f}x), "
      f"{100 * fn.overhead:.0f}% slower (predicted)")
print(f"why: at batch {fn.batch_no_offload} the layers compute {1e3 * h.compute_fwd_s:.0f} ms forward and "
      f"{1e3 * h.compute_bwd_s:.0f} ms backward and save {h.act_bytes / 1e9:.1f} GB; at {h.write_bps / 1e9:.1f} GB/s "
      f"out and {h.read_bps / 1e9:.1f} GB/s back, {100 * h.share:.1f}% of it can move behind that compute. "
      f"Hiding all of it would take {h.needed_bps / 1e9:.0f} GB/s.")
print("giving up the rule: the largest batch when the iteration may slow down by more (predicted)")
for r in flashneuron.slack_sweep(gpt2m, 1024):
    print(f"  slack {r.slack:6.0%}: batch {r.batch_offload:2} ({r.batch_ratio:.1f}x), {100 * r.overhead:5.0f}% slower, "
          f"{r.throughput_offload:5.1f} samples/s (no offload: {r.throughput_no_offload:.1f})")
print("the share that can hide grows with the model's width (same V100 and SSD, batch 1, predicted):")
for name in ("gpt2-medium", "gpt2-xl", "llama2-7b", "gpt3-175b"):
    shape = model_shape(name)
    print(f"  {name:12} hidden {shape.hidden:6,}: {100 * flashneuron.hiding(shape, 1024, 1).share:5.1f}%")
print(f"paper: {fn.published}")
fn_trends = trends.flashneuron_rule(fn, flashneuron.slack_sweep(gpt2m, 1024), {
    model_shape(n).hidden: flashneuron.hiding(model_shape(n), 1024, 1).share
    for n in ("gpt2-medium", "gpt2-xl", "llama2-7b", "gpt3-175b")}, h.share, flashneuron.hiding(gpt2m, 1024, 1).share)
assert all(fn_trends.values()), fn_trends  # each claim of the text below

# %% [markdown]
# At its own setting the rule buys nothing here: a V100 computes GPT-2 medium's layers
# far faster than one SSD can take their activations, so only a few per cent of them hide
# and no batch gains. The batch grows only when the rule is given up, and then each step
# slows by multiples, so throughput falls. A layer's compute grows with h² and its
# activations with h, so the share that hides grows with the model's width, and with the
# SSDs' bandwidth; it does not depend on the batch, since both grow with it (GPT-2 medium's
# share is the same at batch 3, in the `why` line, and at batch 1, in the width list). The paper's
# results include what this model leaves out: FlashNeuron offloads tensors in a compressed
# format, and its throughput gain comes from the larger batch running the GPU more
# efficiently, while the efficiency here is fixed at 50% of peak.
#
# Mobius (Feng et al., ASPLOS 2023) keeps pipeline stages in DRAM and prefetches them onto
# consumer GPUs that share one PCIe uplink, beside ZeRO-style streaming of every layer:

# %%
mb = mobius.compare(mobius.Setup(llama))
print(f"Llama-2 7B on 4 x RTX 4090 sharing PCIe 4, batch {mobius.Setup(llama).batch}: "
      f"Mobius {mb['mobius_s']:.2f} s and {mb['mobius_gb']:.1f} GB "
      f"over PCIe per step; per-layer streaming {mb['zero_offload_s']:.2f} s and {mb['zero_offload_gb']:.1f} GB: "
      f"{mb['zero_offload_gb'] / mb['mobius_gb']:.1f}x the bytes (predicted)")
for row in mobius.sweep(mobius.Setup(llama)):
    print(f"batch {row['batch']:>3}: Mobius {row['mobius_s']:6.2f} s, "
          f"per-layer streaming {row['zero_offload_s']:6.2f} s, ratio {row['zero_offload_s'] / row['mobius_s']:.2f} "
          f"-> {row['faster']} faster ({row['why']})")
print(f"paper: {headline('Mobius')['claim']}")
mobius_trends = trends.mobius_sweep(mb, mobius.sweep(mobius.Setup(llama)), headline("Mobius")["claim"])
assert all(mobius_trends.values()), mobius_trends  # each claim of the text below

# %% [markdown]
# Mobius moves several times fewer bytes than per-layer streaming (the first line above). At
# the smallest batch the step is limited by the shared PCIe link and Mobius wins by a factor
# inside the paper's 3.8-5.1x; as the batch grows, compute takes a larger part of the step and the
# lead shrinks; at large batches compute hides ZeRO's traffic and Mobius's pipeline idle
# time makes it slightly slower (predicted). That idle time stays the same while the step grows with
# the batch (the `why` of each row), so at the largest batch the two come closer again.

# %% [markdown]
# ## 9 · Design: a timeline you can tune
#
# Model, GPU, sequence, micro-batch, link and disk bandwidth, device budget and policy;
# the four streams (compute, device-to-host, host-to-device, disk) of one simulated
# iteration, with the compute stream's gaps showing the stalls (predicted).
#
# Try first: with vDNN on the V100's own PCIe 3 link, raise the host link until vDNN costs
# under 10% more than compute alone. It takes a link far faster than any PCIe in the
# catalogue: a target no host link meets teaches little. The
# checked task below sets a reachable one instead, where the answer needs two of this
# notebook's lessons: the link sets the cost of moving activations (section 4), and choosing
# *what* to move is worth a search (section 5). Set the controls, then press "Check my
# design": it says what is still missing.

# %% tags=["nbval-ignore-output"]
from labkit.offload.panel import OffloadPanel
from labkit.practice import design

offload_panel = OffloadPanel(model="gpt2-large", gpu="V100-32GB", seq=1024, micro_batch=4, budget_gb=16.0)
offload_panel.set_task(design.task("04"))

# %% [markdown]
# ## Build it yourself: activation offload to files
#
# Write the core of vDNN yourself: `FileOffload(folder, model)`, a `torch.autograd.graph.saved_tensors_hooks`
# whose `pack` writes every saved tensor that is not a parameter to one raw file and returns a small handle,
# and whose `unpack` reads it back in backward and removes the file. `build.open_stub` copies a stub to
# `build/act_offload.py` beside this notebook (once; it never overwrites your work).
#
# `build.check_build` runs a tiny MLP (shapes drawn per run) in float32 and bfloat16 (float16 too in some
# runs) under your hooks, in a child process, and checks: gradients
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

# %% [markdown]
# ## 10 · Check yourself

# %%
checks.check("04.offload_gpu_gb", None)

# %%
checks.check("04.pcie_seconds", None)

# %%
checks.check("04.infinity_tb", None)

# %% [markdown]
# **Reasoning across results.** Put two results of this notebook together: the bytes per
# parameter that ZeRO-Offload moves each step (section 6, measured) and the H100's PCIe link
# in the catalogue (`hardware.link(hardware.gpu("H100-SXM").pcie).bandwidth`, bytes per
# second in each direction), plus the fact that PCIe carries both directions at once. Answer
# in seconds.

# %%
from labkit.practice import reasoning  # noqa: E402, F401 - importing it registers the reasoning exercises

checks.check("04.reason.offload_step_s", None)

# %% [markdown]
# **Coding exercise.** Write a greedy swap planner yourself: `choose_swaps(act_bytes,
# budget)` gets the bytes each layer operation saves for backward (a list of numbers) and the
# bytes the device can keep, and returns one bool per activation (True: swap it to host
# memory) such that the activations kept add up to at most `budget`, moving as few bytes as
# you can. The check runs your plan through the offload simulator for GPT-2 XL on a V100 at
# three oversubscriptions: what you keep must add up to at most `budget`, the step must fit,
# and it must move no more bytes over PCIe than a greedy baseline (a failed case names it).

# %%
from labkit import practice  # noqa: E402


def choose_swaps(act_bytes, budget):
    raise NotImplementedError  # your code here


practice.check_code("04.code.choose_swaps", choose_swaps)

# %% [markdown]
# **Handing in.** Every answer, committed prediction and check result is appended as you go to
# `labkit-journal.jsonl` beside this notebook, so a kernel restart loses nothing. To hand them in,
# run `checks.export_answers("answers-04.json", student="your name", notebook="04")` in a new
# cell: it writes every try in order with its verdict, and a summary scored by your committed guesses.
