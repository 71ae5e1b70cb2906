# %% [markdown]
# # 08 · The future: multi-level storage, data orchestration, near-data and in-memory computing
#
# **Why it matters.** Every notebook so far moved data to where the compute is: activations
# out to DRAM and back, optimizer states over PCIe, weights from HBM into the cores. Moving
# data costs more time and energy than computing on it. Three directions follow: treat HBM,
# DRAM and SSD as **one hierarchy** with placement planned from the trace (data
# orchestration, section 1); compute **near the data** (the optimizer step where its states
# live, section 2); and compute **in the memory** itself (analog crossbars, sections 3 and 4,
# and processing-in-memory DRAM, section 5).
#
# Each direction below is an experiment: the trace is recorded from a real training step,
# the crossbar runs the trained tiny GPT's layers, and the rest is labkit's model (predicted).

# %%
from labkit.future import crossbar, crossbar_study, hierarchy, near_data, pim, trends
from labkit.future import exercises as _exercises  # noqa: F401  (registers the 08.* exercises)
from labkit.predict.tables import text_table
from labkit.rig.model import GPTConfig
from labkit.rig.train import TrainConfig, Trainer, seed_everything
from labkit.teach import checks, plots

seed_everything(0)

# %% [markdown]
# ## 1 · One step's trace, on a three-level hierarchy
#
# One real training step of the tiny GPT, recorded op by op: the weights each op reads, the
# activations it saves, the ones backward reads back, and its FLOPs.

# %%
trainer = Trainer(TrainConfig(model=GPTConfig(vocab_size=35, n_layer=2, d_model=64, seq_len=32), batch_size=4))
trace = hierarchy.record_trace(trainer)
print(f"{len(trace.ops)} ops, {len(trace.blocks)} blocks: {trace.bytes_of('weight'):,} B of weights, "
      f"{trace.bytes_of('activation'):,} B of activations, working set {trace.working_set:,} B (measured)")

# %% [markdown]
# The trace replays on HBM (a cache), host DRAM (a cache) and an SSD behind both, with
# bandwidths from the catalogue (H100 HBM, PCIe 5, DDR5, NVMe). Two policies: **LRU**
# (fetch on demand, evict the least recently used page) and **trace-aware** (knows every
# next use from the first iteration: evicts the page used furthest in the future, Belady's
# MIN, and prefetches ahead of use). HBM and DRAM are sized as shares of the working set
# counted in whole 4 KiB pages, as the caches hold it (so a little above the bytes printed
# above): HBM by the first column of the table below, DRAM at 30%. The weights start in place
# (HBM first, then DRAM; the SSD keeps a copy of all of them) and each activation is created in
# HBM, so a *miss* is a read served from below HBM: with the whole working set in HBM nothing
# misses. In the second table (the trace-aware schedule at 50%) the SSD's capacity prints as
# None: it backs everything, so it serves every read that reaches it. **Predict:** with HBM
# holding half the working set, what share of LRU's stall time does the trace-aware schedule
# remove, in per cent?

# %%
predicted_stall_cut = None  # per cent

# %%
rows, replays = [], {}
for fraction in (1.0, 0.8, 0.5, 0.3):
    lru, aware = replays[fraction] = hierarchy.compare(trace, hierarchy.scaled(trace, fraction, 0.3))
    rows.append([f"{fraction:.0%}", lru.misses, aware.misses, f"{1e6 * lru.stall_s:,.0f}",
                 f"{1e6 * aware.stall_s:,.0f}"])
    if fraction == 0.5:
        half = (lru, aware)
cut = 100 * (1 - half[1].stall_s / half[0].stall_s)
print(checks.reveal_number(predicted_stall_cut, cut, "Stall removed by the trace-aware schedule (simulated)", "%", 1,
                           rel_tol=0.15, key="08.predict.stall_cut"))  # a simulated share: right within 15% of it

# %%
print(text_table(["HBM / working set", "LRU misses", "trace-aware misses", "LRU stall, us", "trace-aware stall, us"],
                 rows))
print(text_table(["tier", "capacity B", "reads", "hits", "hit rate", "bytes served"], half[1].rows()))

# %% [markdown]
# The trace-aware schedule changes two things at once: which page it evicts (MIN) and when it
# fetches (ahead of use). Replaying each half alone, at the same half-size HBM, shows what
# each gains (simulated):

# %%
parts = hierarchy.ablation(trace, hierarchy.scaled(trace, 0.5, 0.3))
lru_stall = parts["lru"].stall_s
print(text_table(["policy", "misses", "stall, us", "stall removed"],
                 [[name, r.misses, f"{1e6 * r.stall_s:,.0f}", f"{100 * (1 - r.stall_s / lru_stall):.1f}%"]
                  for name, r in parts.items()]))
trace_claims = trends.hierarchy(replays, parts)  # what the text around these tables claims
for claim, held in trace_claims.items():
    print(f"{claim}: {'yes' if held else 'NO'}")
assert all(trace_claims.values()), trace_claims

# %% [markdown]
# Training's access pattern repeats every iteration (notebook 04), so the schedule can be
# planned once, from the first: fewer misses (MIN is optimal in misses, and prefetching alone
# leaves the misses as they are) and copies started before they are needed. On this trace the
# eviction rule removes most of the stall; prefetching alone removes some of it, and only a
# little more on top of MIN. Orchestration is the software half of multi-level storage.
#
# ## 2 · Near-data computing: run the optimizer where its states live
#
# Adam on 7 bn parameters whose states (fp32 master weights and two moments, 12 bytes per
# parameter) live in host DRAM. The standard path moves them to the GPU and back; the
# near-data path sends the gradients to the states and the updated 16-bit weights back.
# First the bytes, measured on a real fp32 Adam step of the tiny GPT (4-byte gradients and
# weights; the 7 bn case below is mixed precision, 2 + 2 bytes) beside the formula:

# %%
measured = near_data.measure_adam(Trainer(TrainConfig(model=GPTConfig(vocab_size=35, n_layer=2, d_model=32),
                                                      batch_size=4)))
print(text_table(["quantity", "measured B", "formula B"], [[q, f"{m:,}", f"{f:,}"] for q, m, f in measured.rows()]))
assert all(m == f for _, m, f in measured.rows())  # measured == model, to the byte

# %% [markdown]
# **Predict:** is the near-data path faster for 7 bn parameters on an H100 over PCIe 5?

# %%
predicted_near_faster = None  # True or False

# %%
paths = near_data.adam_paths(7_000_000_000)
print(checks.reveal_claims({"near-data is faster": predicted_near_faster},
                           {"near-data is faster": paths.winner == "near-data"}, key="08.predict.near_faster"))
be = near_data.break_even_bandwidth("dram")

# %%
print(text_table(["path", "leg", "where", "bytes", "seconds", "joules"],
                 [[p, "total (bytes: over links)" if leg == "total" else leg, where, f"{b / 1e9:,.0f} GB",
                   f"{s:.3f}", f"{j:.1f}"] for p, leg, where, b, s, j in paths.rows()]))
print(f"near-data wins below {be / 1e9:.0f} GB/s of link bandwidth (computed at 1 bn parameters); for states "
      f"on an SSD whose engine only gets the drive's own bandwidth, below "
      f"{near_data.break_even_bandwidth('ssd') / 1e9:.1f} GB/s (predicted)")
near_claims = trends.near_data(paths)  # what the text below claims of the table
for claim, held in near_claims.items():
    print(f"{claim}: {'yes' if held else 'NO'}")
assert all(near_claims.values()), near_claims

# %% [markdown]
# The step is memory-bound: it touches 28 bytes per parameter for a dozen FLOPs. Doing it
# in DRAM is slower per byte than in HBM, but it saves the trip over PCIe, which is slower
# still. Energy moves less than time: near-data saves the link's joules but spends more per
# byte touched: the same step costs several times the joules in DRAM as in HBM (the two step
# rows above).
#
# ## 3 · In-memory computing: an analog crossbar runs the trained GPT
#
# In a resistive crossbar each weight is a pair of conductances; inputs are voltages on the
# rows, and each column's current is a dot product (Kirchhoff's law), computed where the
# weights are stored (PRIME, ISAAC, ISCA 2016). The price is precision: weights become a few
# conductance levels, inputs pass a DAC, outputs an ADC, and every read is noisy. The tiny
# GPT is trained, then its attention and MLP linear layers are swapped for simulated
# crossbars (128 x 128 arrays). **Predict:** the fewest ADC bits that keep the validation
# loss within 0.01 of the digital model (the sweep tries 2, 4, 6, 8 and 10 bits).

# %%
predicted_adc_bits = None

# %%
gpt = crossbar.tiny_trainer()
adc = crossbar.sweep(gpt, "adc_bits", [2, 4, 6, 8, 10, None])
enough = min(p.setting for p in adc.points if p.setting is not None and abs(p.gap) <= 0.01)
print(checks.reveal_number(predicted_adc_bits, enough, "Fewest ADC bits within 0.01 (simulated)", "", 1, exact=True,
                           key="08.predict.adc_bits"))
bits = [p.setting for p in adc.points if p.setting is not None]

# %%
print(text_table(["ADC bits", "analog loss", "digital loss", "gap"], adc.rows()))
plots.line({"analog": [p.loss for p in adc.points if p.setting is not None],
            "digital": [adc.digital_loss] * len(bits)}, "ADC bits", "validation loss",
           "Analog crossbar: loss against ADC precision (simulated)", x=bits)

# %% [markdown]
# Read noise, as a fraction of the largest conductance. Noise is random, so each level runs
# with four seeds of the noise; the table gives the mean gap and its spread (seeded, so the
# same every run):

# %%
noise = crossbar_study.seed_sweep(gpt, "noise", [0.02, 0.05, 0.1, 0.2], seeds=range(4))
print(text_table(["read noise", "digital loss", "mean gap", "smallest gap", "largest gap"], noise.rows()))
plots.line({"mean gap": [p.mean for p in noise.points], "smallest gap": [p.spread[0] for p in noise.points],
            "largest gap": [p.spread[1] for p in noise.points]},
           "read noise (fraction of the largest conductance)", "analog loss - digital loss",
           "Analog crossbar: loss gap against read noise, 4 seeds (simulated)", x=[p.setting for p in noise.points])

# %%
crossbar_claims = trends.crossbar(adc, noise)  # the ADC table above, and what the text below claims of this one
for claim, held in crossbar_claims.items():
    print(f"{claim}: {'yes' if held else 'NO'}")
assert all(crossbar_claims.values()), crossbar_claims

# %% [markdown]
# At small noise the seeds' gaps spread as widely as their mean: one seed alone could show the
# noisy crossbar almost matching the digital model, which is chance, not a result. The spread
# grows with the noise, and the mean gap grows faster. (The tiny GPT here is trained, and the
# crossbar simulated, in float64, so the last-bit differences between one CPU's kernels and
# another's stay far below the digits printed; in fp32 the same differences, carried through
# 60 training steps, can reach them.)

# %% [markdown]
# ## 4 · What it saves: energy of one matrix-vector product
#
# A 128 x 128 product on a crossbar beside fetching the weights and multiplying digitally,
# in fp32 and in int8 (45 nm energies: Han et al. 2015, Figure 1, after Horowitz, for fp32 and
# the 32-bit reads; Horowitz's ISSCC 2014 table for the int8 multiply and int32 add; ADC and
# device energies are stated assumptions in `datasets/pim.toml`):

# %%
e = pim.mvm_energy(128, 128)
print(text_table(["path", "part", "nJ"], [[p, part, f"{nj:,.2f}"] for p, part, nj in e.rows()]))
for base in ("sram", "dram"):
    print(f"crossbar saves {e.ratio(base):,.0f}x against fp32 and {e.ratio(base, 'int8'):,.0f}x against int8, "
          f"weights from {base.upper()} (predicted)")

# %% [markdown]
# In this model the crossbar's own cost is mostly the digital shift-add and rescale of its
# partial sums, not the ADC. Against a fair digital baseline, int8 weights and integer
# multiply-adds, the saving shrinks (the two figures on each line above): most of the fp32
# baseline's cost was moving 32-bit words, and int8 moves a quarter of the bytes.
# %% [markdown]
# ## 5 · Processing in memory: published results beside the lab's model
#
# The headline claims, as their papers report them (sources in `datasets/pim.toml`), and what
# labkit's roofline and energy model predict for the same kind of kernel:

# %%
for v in pim.model_views():
    print(f"{v.system:8} reported {v.reported_x:g}x ({v.metric}); model {v.modelled_x:,.1f}x "
          f"(model / reported {v.modelled_x / v.reported_x:.2f}): {v.detail}")
energy_claims = trends.energy(e, {v.system: v.modelled_x / v.reported_x for v in pim.model_views()})
for claim, held in energy_claims.items():  # what the text of sections 4 and 5 claims
    print(f"{claim}: {'yes' if held else 'NO'}")
assert all(energy_claims.values()), energy_claims

# %% [markdown]
# The roofline says why PIM helps memory-bound kernels: it multiplies the bandwidth the
# computation sees. The model and the papers disagree everywhere, in both directions and by
# the factors printed: the difference is what the simple model leaves out: peripheral
# circuits, the host's share of the work, the kernels measured. That is where the research is.
#
# ## 6 · Design: a crossbar
#
# ADC bits, weight bits, read noise, array size and the number of reads averaged, for one
# layer: the trained GPT's MLP output projection (block 0), fed the inputs it really sees on
# a validation batch. The panel shows its output error beside the digital layer (measured on
# the simulated crossbar) and the energy per product (predicted). At 2% read noise one read
# cannot get under 1% error on arrays of 16 rows or more, whatever the converters: find the
# setting that does, at the least energy per product (averaging reads cuts the noise, and
# costs conversions).

# %% tags=["nbval-ignore-output"]
from labkit.future.panel import CrossbarPanel
from labkit.practice import design

crossbar_panel = CrossbarPanel.from_trainer(gpt, noise_percent=2.0, weight_bits=8)
crossbar_panel.set_task(design.task("08"))

# %% [markdown]
# ## 7 · Check yourself

# %%
checks.check("08.standard_link_gb", None)

# %%
checks.check("08.dram_pj_per_bit", None)

# %%
checks.check("08.hbm_pim_roofline", None)

# %% [markdown]
# **Reasoning across results.** Section 2 printed the break-even link bandwidth for the
# optimizer step run near the data. Before you carry it to a 70bn-parameter model, ask how
# each path's bytes grow with the parameter count.

# %%
from labkit.practice import reasoning  # noqa: E402, F401 - importing it registers the reasoning exercises

checks.check("08.reason.break_even_70b", None)

# %% [markdown]
# **Coding exercise.** Write the eviction policy of section 1's fast tier:
# `evict(resident, future)` gets the set of block ids now in fast memory and the rest of the
# step's accesses in order, and returns the resident block to push out. The check records
# one real training step of a tiny GPT (every weight and saved activation each forward or
# backward op touches, as in section 1), replays its accesses through a fast tier holding a
# quarter, a half and three quarters of the blocks, and counts misses: your policy passes
# when it misses no more than the best possible policy for a known future, there and on two
# short traces built so that plausible shortcuts miss more.

# %%
from labkit import practice  # noqa: E402


def evict(resident, future):
    raise NotImplementedError  # your code here


practice.check_code("08.code.evict", evict)

# %% [markdown]
# **Handing in.** Every answer, committed prediction and check result is appended as you go to
# `labkit-journal.jsonl` beside this notebook, so a kernel restart loses nothing. To hand them in,
# run `checks.export_answers("answers-08.json", student="your name", notebook="08")` in a new
# cell: it writes every try in order with its verdict, and a summary scored by your committed guesses.
