# %% [markdown]
# # 04 · Heterogeneous storage: offload to DRAM and SSD
#
# **Why it matters.** GPU memory is fast but small; host DRAM is ten times larger and an
# NVMe SSD a hundred times, behind links tens of times slower (PCIe). Training has one
# property that makes the slow tiers usable: its access pattern is **the same every
# iteration**, so every transfer can be planned from the first iteration and overlapped
# with compute. vDNN (Rhu et al., MICRO 2016) moves activations out in the forward pass
# and back before backward; SwapAdvisor (ASPLOS 2020) searches which to move;
# ZeRO-Offload (ATC 2021) keeps the optimizer on the CPU; ZeRO-Infinity (SC 2021) puts
# model states on NVMe; FlashNeuron (FAST 2021) and Mobius (ASPLOS 2023) use SSDs and
# DRAM on commodity machines.
#
# Below, the tiny GPT runs against a **budgeted device** (a capacity scaled so that it
# feels what a real model feels on a real GPU); offload writes real bytes to real files.
# Figures at scale are predicted by labkit's simulator (`labkit.sim`).

# %%
from labkit import checks, hardware, plots
from labkit.model import GPTConfig
from labkit.offload import exercises as _exercises  # noqa: F401  (registers the 04.* exercises)
from labkit.offload import flashneuron, mobius, swapadvisor, zero_infinity, zero_offload
from labkit.offload.budget import DeviceOutOfMemory, budgeted_step, model_state_bytes, scaled_capacity
from labkit.offload.iteration import machine, transformer_ops
from labkit.offload.trace import repeats, trace_iterations, trace_step
from labkit.offload.vdnn import Offloader, OffloadPolicy, offloaded_step
from labkit.shapes import model_shape
from labkit.train import TrainConfig, Trainer, parameters_equal, seed_everything

seed_everything(0)
config = TrainConfig(model=GPTConfig(vocab_size=35, d_model=128, n_layer=4, n_head=4), batch_size=16)
tiers = hardware.load_catalogue()
for name in ("A100-80GB",):
    print(f"{name}: {hardware.gpu(name).memory_bytes / 1e9:.0f} GB at "
          f"{hardware.gpu(name).memory_bandwidth / 1e9:,.0f} GB/s (catalogue)")
for t in tiers.tiers:
    print(f"{t.name}: {t.capacity_bytes / 1e9:,.0f} GB at {t.read_bandwidth / 1e9:.2f} GB/s read (catalogue)")
print(f"PCIe 4 x16: {hardware.link('pcie4-x16').bandwidth / 1e9:.0f} GB/s per direction (catalogue)")

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
print(f"model states {states:,} B + activations {trace.total_bytes:,} B; device capacity {capacity:,} B "
      f"(states take {100 * states / capacity:.0f}% of it, as GPT-2 XL's take of an A100-40GB)")
try:
    budgeted_step(Trainer(config), capacity)
except DeviceOutOfMemory as err:
    print(f"DeviceOutOfMemory: {err}")

# %% [markdown]
# ## 2 · The pattern repeats
#
# **Predict:** the first iteration saves a sequence of tensors (module, shape, dtype,
# bytes). Will iterations 2 and 3 save exactly the same sequence?

# %%
predicted_repeats = None  # True or False

# %%
traces = trace_iterations(Trainer(config), steps=3)
print(f"{len(traces[0].entries)} saved tensors per iteration, {traces[0].total_bytes:,} bytes; "
      f"identical in all 3 iterations: {repeats(traces)} (measured); you said {predicted_repeats}")
for e in traces[0].entries[:6]:
    print(f"  #{e.index:<3} {e.module:28} {str(tuple(e.shape)):18} {e.nbytes:>10,} B  kept for {e.lifetime} events")

# %% [markdown]
# ## 3 · vDNN: offload in forward, prefetch in backward
#
# With the trace as the plan, labkit's `Offloader` moves every saved activation out as it
# is saved, to a DRAM pool or to real files on disk, and a background thread reads them
# back in backward order, ahead of use. **Predict:** does the step now fit, and do the
# parameters after the step change?

# %%
predicted_fits = None  # True or False
predicted_changes = None  # True or False

# %%
results = {}
for store in ("dram", "disk"):
    run = Trainer(config)
    with Offloader(run.model, store, policy=OffloadPolicy("all"), trace=trace, capacity=capacity) as off:
        loss = offloaded_step(run, off)
    results[store] = (off, run, loss)
    print(f"{store}: peak within the {capacity:,} B capacity: {off.peak <= capacity}; offloaded "
          f"{off.stats.bytes_offloaded:,} B (= the trace's {trace.total_bytes:,} B)")
plain = Trainer(config)
plain_loss = plain.step()
print(f"losses: plain {plain_loss:.4f}, dram {results['dram'][2]:.4f}, disk {results['disk'][2]:.4f}")
assert all(parameters_equal(plain.model, r[1].model) for r in results.values())
print("parameters after the step are bit-identical to the plain run's, with DRAM and with disk offload")
print(f"you said: fits {predicted_fits}, changes {predicted_changes}")

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
# same trace. Bytes moved must agree exactly:

# %%
from labkit.offload.calibrate import calibrate

cal = calibrate()
for r in cal.rows:
    print(f"{r.store}: {r.measured_bytes:,} B moved out and back (measured) = {r.simulated_bytes:,.0f} B (simulated)")
assert all(r.measured_bytes == r.simulated_bytes for r in cal.rows)

# %% [markdown]
# Time and peak memory, measured beside simulated (wall clock, so not checked). The
# simulator leaves out vDNN's own software cost (the saved-tensor hooks and the hand-off to
# the prefetch thread, which competes with compute for two cores); the gap is that cost.

# %% tags=["nbval-ignore-output"]
print(f"this machine: memcpy {cal.copy_bps / 2**30:.2f} GiB/s, {1e3 * cal.file_s:.2f} ms per offload file; "
      f"{cal.disk.summary()}")
for r in cal.rows:
    print(f"{r.store}: added {1e3 * r.measured_added_s:.1f} ms measured, {1e3 * r.simulated_added_s:.1f} ms simulated; "
          f"peak {r.measured_peak_bytes:,} B measured, {r.simulated_peak_bytes:,.0f} B simulated")

# %% [markdown]
# ## 4 · vDNN at scale: when does the copy hide behind compute?
#
# Llama-2 7B, one layer's saved activations (s = 4,096, b = 1, 16-bit, fused attention)
# offloaded over PCIe 4 from an A100 while the next layer computes (predicted). **Predict:**
# does the A100 wait for PCIe at micro-batch 1?

# %%
predicted_stall = None  # True or False

# %%
from labkit.estimate import activation_bytes_per_layer, forward_flops
from labkit.offload.vdnn import predict_vdnn, stall_seconds

llama = model_shape("llama2-7b")
for b in (1, 4):
    per_layer = activation_bytes_per_layer(llama, 4096, b, attention="fused")
    flops = (forward_flops(llama, 4096, b) - 2 * 4096 * b * llama.hidden * llama.vocab) / llama.layers
    tl = predict_vdnn(per_layer, flops, llama.layers, gpu="A100-80GB")
    print(f"b={b}: {per_layer / 1e9:.2f} GB per layer over {hardware.link('pcie4-x16').name}; step "
          f"{tl.makespan:.2f} s of which {stall_seconds(tl):.2f} s waiting for copies (predicted)")
print(f"you said {predicted_stall}")
plots.gantt(tl, title="vDNN, Llama-2 7B, b=4, A100 over PCIe 4 (predicted)")

# %% [markdown]
# A layer's forward grows with b·s·h² while its activations grow with b·s·h: both scale
# with the batch, so the ratio is set by h and by the link, not by the batch. On PCIe 4
# a 7B model's activations take longer to move than to compute: vDNN must choose
# *which* tensors to move. That is SwapAdvisor's question.
#
# ## 5 · SwapAdvisor: a genetic search over what to swap
#
# GPT-2 medium (s = 1,024, b = 4) on a 24 GB card capped at 16.8 GB: a genetic algorithm
# searches which activations to swap and how early to prefetch them, each plan scored by
# the simulator (predicted), beside vDNN's rule (swap everything, each layer waiting for its copy, prefetch one ahead).
# **Predict:** how much slower than compute alone is the best plan the search finds, in per cent?

# %%
predicted_search_overhead = None  # per cent

# %%
gpt2m = model_shape("gpt2-medium")
ops = transformer_ops(gpt2m, 1024, 4, hardware.gpu("RTX-4090").peak_flops["bf16"])
card = machine("RTX-4090", 6e9, capacity_bytes=16.8e9)
found = swapadvisor.search(ops, card, seed=3)
summary = swapadvisor.describe(found, card)
for name in ("none", "vdnn", "ga"):
    print(f"{name:5} {summary[f'{name}_time_s']:.3f} s, peak {summary[f'{name}_peak_gb']:.2f} GB, "
          f"swaps {100 * summary[f'{name}_swapped']:.0f}% of tensors, fits: {bool(summary[f'{name}_fits'])}")
print(checks.reveal_number(predicted_search_overhead, 100 * (summary["ga_time_s"] / summary["none_time_s"] - 1),
                           "Best plan's slowdown (predicted)", "%", 1))
plots.line({"best plan": found.history}, "generation", "iteration time (s, predicted)",
           "SwapAdvisor-style search, converging")

# %% [markdown]
# ## 6 · ZeRO-Offload: the optimizer on the CPU
#
# The model keeps 16-bit weights and gradients (4 bytes per parameter); the CPU side keeps
# the fp32 master weights and Adam's moments (12) and runs the Adam step. Per step the
# link carries the gradients down and the updated weights up. **Predict:** how many bytes
# per parameter cross the link per step?

# %%
predicted_bytes_per_param = None

# %%
run = zero_offload.run_zero_offload(TrainConfig(model=config.model, precision="bf16-mixed", batch_size=8), 3)
moved = run.bytes_down[-1] + run.bytes_up[-1]
print(f"Psi = {run.params:,}; per step {run.bytes_down[-1]:,} B down + {run.bytes_up[-1]:,} B up "
      f"(measured) = {moved / run.params:.0f} bytes per parameter; predicted {run.predicted_bytes_per_step:,} B")
assert moved == run.predicted_bytes_per_step
print(checks.reveal_number(predicted_bytes_per_param, moved / run.params, "Bytes per parameter (measured)", "", 1))
reference = Trainer(TrainConfig(model=config.model, precision="bf16-mixed", batch_size=8))
assert reference.run(3) == run.losses
print("losses equal plain mixed-precision training bit for bit (same math, another place)")

# %%
print("largest model on one V100-32GB (predicted by labkit; the last row is the paper's)")
for row in zero_offload.largest_model_table():
    print(f"  {row['params'] / 1e9:6.1f} B parameters  {row['setup']}")

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
print(f"losses {', '.join(f'{x:.4f}' for x in inf.losses)}: the same numbers as training in memory")

# %% tags=["nbval-ignore-output"]
print(f"raw disk ({inf.raw.method}): write {inf.raw.write_bps / 2**30:.2f} GiB/s, "
      f"read {inf.raw.read_bps / 2**30:.2f} GiB/s")
print(f"streaming achieved: read {inf.achieved_read_bps / 2**30:.2f} GiB/s ({100 * inf.read_ratio:.0f}% of raw), "
      f"write {inf.achieved_write_bps / 2**30:.2f} GiB/s ({100 * inf.write_ratio:.0f}%)")

# %%
fit = zero_infinity.dgx2_fit()
print(f"one DGX-2 ({fit.gpus} GPUs, {fit.dram_bytes / 1e12:.1f} TB DRAM, {fit.nvme_bytes / 1e12:.0f} TB NVMe) at "
      f"{fit.bytes_per_param} bytes of states per parameter (predicted):")
print(f"  states in GPU memory: {fit.params_gpu_only / 1e9:,.0f} B parameters; in DRAM: "
      f"{fit.params_dram / 1e9:,.0f} B; on NVMe: {fit.params_nvme / 1e12:.1f} T")
print(f"  published: {fit.published_claim}")

# %% [markdown]
# ## 8 · SSDs and DRAM on commodity machines: FlashNeuron and Mobius (predicted)
#
# FlashNeuron sends activations from the GPU straight to an SSD, choosing offline which
# tensors to send so that the copies hide behind compute. Mobius keeps pipeline stages in
# DRAM and prefetches them onto consumer GPUs that share one PCIe uplink.

# %%
fn = flashneuron.compare(gpt2m, 1024, slack=1e9)
print(f"FlashNeuron, GPT-2 medium on a 16 GB V100 with NVMe: batch {fn.batch_no_offload} -> {fn.batch_offload} "
      f"({fn.batch_ratio:.1f}x), iteration {100 * fn.overhead:.0f}% slower; paper: {fn.published}")
mb = mobius.compare(mobius.Setup(llama))
print(f"Llama-2 7B on 4 x RTX 4090 sharing PCIe 4: Mobius {mb['mobius_s']:.2f} s and {mb['mobius_gb']:.1f} GB "
      f"over PCIe per step; per-layer streaming {mb['zero_offload_s']:.2f} s and {mb['zero_offload_gb']:.1f} GB")

# %% [markdown]
# An honest gap and a regime. FlashNeuron's 12-14x larger batch with little slowdown
# relies on compressing activations and on its models' compute; here an uncompressed GPT-2
# stream saturates the SSD, so the batch grows tenfold only at a large slowdown. Mobius
# moves about nine times fewer bytes than per-layer streaming: at fine-tuning batches the
# step is limited by the shared PCIe link and Mobius wins (4.2x at batch 4, near the
# paper's 3.8-5.1x); at large batches compute hides ZeRO's traffic and Mobius's pipeline
# idle time makes it slightly slower (predicted):

# %%
for row in mobius.sweep(mobius.Setup(llama)):
    print(f"batch {row['batch']:>3}: Mobius {row['mobius_s']:6.2f} s, "
          f"per-layer streaming {row['zero_offload_s']:6.2f} s "
          f"-> {row['faster']} faster ({row['why']})")

# %% [markdown]
# ## 9 · Design: a timeline you can tune
#
# Model, GPU, sequence, micro-batch, link and disk bandwidth, device budget and policy;
# the four streams (compute, device-to-host, host-to-device, disk) of one simulated
# iteration, with the compute stream's gaps showing the stalls (predicted). Find the
# slowest link at which vDNN still costs under 10%.

# %% tags=["nbval-ignore-output"]
from labkit.offload.panel import OffloadPanel

OffloadPanel()

# %% [markdown]
# ## 10 · Check yourself

# %%
checks.check("04.zero_offload_gb", None)

# %%
checks.check("04.pcie_seconds", None)

# %%
checks.check("04.infinity_tb", None)
