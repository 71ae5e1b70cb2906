# %% [markdown]
# # 07 · Cost and green storage: what memory choices cost in money, energy and carbon
#
# **Why it matters.** High-bandwidth memory is the most expensive memory per byte there is,
# and it draws power whether it is busy or not; model growth keeps raising the capacity
# training needs; and every byte moved or written costs energy, and wears flash out. The
# earlier notebooks chose where data lives by *whether it fits* and *how fast* it runs. This
# one adds dollars, kilowatt-hours, kilograms of CO2 and SSD lifetimes.
#
# Every price, power and energy figure comes from `datasets/hardware.toml` and
# `datasets/grid.toml`, each with its source and date. **These figures change** (GPU prices
# by 2x within a year, grids year by year): read the results as orders of magnitude, and
# edit the data files to redo them with today's numbers. The bytes moved come from real
# micro-runs; everything at scale is labkit's model (predicted).

# %%
from labkit import checks, hardware
from labkit.economics import capital, energy, grid, run, strategies
from labkit.economics import exercises as _exercises  # noqa: F401  (registers the 07.* exercises)
from labkit.tables import text_table

h100 = hardware.gpu("H100-SXM")
print(f"H100-SXM: ${h100.price_usd:,.0f}, {h100.tdp_watts:.0f} W, ${h100.cloud_usd_per_hour:.2f} per GPU-hour "
      "(catalogue; each figure's source and date are in datasets/hardware.toml)")
print(f"grid: world {grid.region('world').value:.0f} gCO2/kWh ({grid.region('world').year}), "
      f"PUE {grid.pue():.2f} ({grid.figure('pue', 'industry-average').year})")

# %% [markdown]
# ## 1 · What a GB costs, tier by tier
#
# **Predict:** how many times more does a GB of HBM cost than a GB of NVMe SSD?

# %%
predicted_hbm_over_ssd = None

# %%
rows = [[kind, f"{capital.usd_per_gb(kind):,.3f}"] for kind in ("hbm", "dram", "ssd", "hdd")]
print(text_table(["tier", "USD per GB (catalogue)"], rows))
print(checks.reveal_number(predicted_hbm_over_ssd, capital.usd_per_gb("hbm") / capital.usd_per_gb("ssd"),
                           "HBM over SSD, per GB", "x", 1))

# %% [markdown]
# HBM's price here is the GPU's price over its memory: you cannot buy HBM alone, which is the
# point. A byte in GPU memory costs thousands of times a byte on flash.
#
# ## 2 · Moving data costs more energy than computing on it
#
# Horowitz (ISSCC 2014, 45 nm): **predict** how many fp32 multiply-adds cost the energy of one
# 32-bit read from DRAM.

# %%
predicted_fmas = None

# %%
pj = energy.horowitz_pj()
print(", ".join(f"{k} {v:g} pJ" for k, v in pj.items()))
print(checks.reveal_number(predicted_fmas, energy.dram_read_over_fma(), "FMAs per DRAM read (Horowitz)", "", 1))
rows = [["HBM (H100)", f"{energy.gpu_memory_j_per_bit(h100) * 1e12:.1f}"],
        ["PCIe 5", f"{energy.link_j_per_bit(hardware.link('pcie5-x16')) * 1e12:.1f}"],
        ["NVLink 4", f"{energy.link_j_per_bit(hardware.link('nvlink4')) * 1e12:.1f}"],
        ["DDR5 read", f"{energy.tier_j_per_bit(hardware.tier('DDR5-4800'), 'read') * 1e12:.1f}"],
        ["NVMe read", f"{energy.tier_j_per_bit(hardware.tier('NVMe-PCIe4'), 'read') * 1e12:.1f}"],
        ["NVMe write", f"{energy.tier_j_per_bit(hardware.tier('NVMe-PCIe4'), 'write') * 1e12:.1f}"]]
print(text_table(["per bit moved", "pJ (catalogue)"], rows))

# %% [markdown]
# ## 3 · Measured inputs: the bytes offload really moves
#
# Notebook 04 ran ZeRO-Offload and ZeRO-Infinity on the tiny GPT for real. The same runs here
# give the bytes per parameter per step that cross PCIe (ZeRO-Offload) and that are read
# from and written to NVMe (ZeRO-Infinity), measured; the cost model below takes them as its
# inputs.

# %%
from labkit.model import GPTConfig
from labkit.offload import zero_infinity, zero_offload
from labkit.train import TrainConfig

tiny = TrainConfig(model=GPTConfig(vocab_size=35, d_model=64, n_layer=2, n_head=4), precision="bf16-mixed",
                   batch_size=4)
zo = zero_offload.run_zero_offload(tiny, 2)
zi = zero_infinity.run_zero_infinity(tiny, 2)
measured = {
    "dram-offload": strategies.Traffic(link=(zo.bytes_down[-1] + zo.bytes_up[-1]) / zo.params, nvme_read=0.0,
                                       nvme_write=0.0),
    "ssd-offload": strategies.Traffic(link=strategies.DEFAULT_TRAFFIC["ssd-offload"].link,
                                      nvme_read=zi.bytes_read[-1] / zi.params,
                                      nvme_write=zi.bytes_written[-1] / zi.params),
}
print(f"dram-offload per parameter per step: link {measured['dram-offload'].link:.2f} B (measured)")
ssd = measured["ssd-offload"]
print(f"ssd-offload  per parameter per step: NVMe read {ssd.nvme_read:.2f} B, NVMe write {ssd.nvme_write:.2f} B "
      f"(measured); link {ssd.link:.2f} B (ZeRO-Infinity's formula: the micro-run has no GPU link)")

# %% [markdown]
# ## 4 · One model, three ways
#
# Llama-2 7B fine-tuned on 20 B tokens on H100s, with 4 M-token batches, MFU 0.4 (an
# assumption): all in HBM on as few GPUs as hold it, with DRAM offload (optimizer on the CPU)
# on fewer, with SSD offload (states on NVMe) on fewest. **Predict:** which costs the fewest
# dollars when renting GPUs by the hour?

# %%
predicted_cheapest = None  # "hbm", "dram-offload" or "ssd-offload"

# %%
runs = run.compare("llama2-7b", 20e9, "H100-SXM", traffic=measured)
table = [[s, r.gpus, f"{r.days:.1f}", f"{r.cloud_usd:,.0f}", f"{r.owned_usd:,.0f}", f"{r.facility_kwh:,.0f}",
          f"{r.kg_co2:,.0f}", f"{r.ssd_life_used:.3f}"] for s, r in runs.items()]
print(text_table(["strategy", "GPUs", "days", "rented $", "owned $", "kWh", "kg CO2", "SSD lives"], table))
best = run.winners(runs)
for metric, who in best.items():
    print(f"lowest {metric}: {', '.join(who)}")
print(f"you said {predicted_cheapest}; cheapest to rent (within 0.5%): {', '.join(best['cloud_usd'])}")

# %% [markdown]
# With a large batch nothing waits for PCIe or NVMe, so every strategy uses the **same
# GPU-hours**: renting costs the same, and offload only trades GPUs for days. Energy and
# carbon go up a little with offload (the hosts, DRAM and SSDs run longer), and SSD offload
# writes flash on every step.
#
# ## 5 · Break it: a small batch on SSD offload
#
# The same run on 8 GPUs with a 128 k-token batch: each step now has much less compute to
# hide the NVMe traffic behind.

# %%
small = run.compare("llama2-7b", 20e9, "H100-SXM", gpus={s: 8 for s in strategies.STRATEGIES}, traffic=measured,
                    batch_tokens=32 * 4096)
for s, r in small.items():
    print(f"{s:13} {r.days:6.1f} days, ${r.cloud_usd:>9,.0f} rented, stall {r.plan.stall_s:.2f} s per step, "
          f"{r.ssd_life_used:.2f} SSD lifetimes used")

# %% [markdown]
# Now the GPUs wait on the drives: the SSD run takes longer, costs more GPU-hours, and wears
# through drives. Offload to SSD pays when each step has compute to hide its traffic.
#
# ## 6 · Where the electricity comes from
#
# The same HBM run's facility energy (IT energy x PUE) on different grids (predicted):

# %%
base = runs["hbm"]
facility_j = base.energy.facility_j(base.pue)
rows = [[g, f"{grid.region(g).value:.0f}", f"{grid.carbon_kg(facility_j, grid.region(g).value):,.0f}",
         str(grid.region(g).year)] for g in grid.names("region")]
print(text_table(["region", "gCO2/kWh", "kg CO2 for this run", "year"], rows))

# %% [markdown]
# The grid matters far more than the storage strategy: over a factor of twenty between regions,
# a few per cent between strategies.
#
# ## 7 · Design
#
# Model, tokens, GPU, strategy, electricity price and grid: time, dollars, energy, carbon and
# SSD wear, side by side for the three strategies (predicted). Find a setting where SSD
# offload costs the most carbon, and one where it costs no more than HBM.

# %% tags=["nbval-ignore-output"]
from labkit.economics.panel import EconomicsPanel

EconomicsPanel()

# %% [markdown]
# ## 8 · Check yourself

# %%
checks.check("07.hbm_over_ssd", None)

# %%
checks.check("07.dram_read_fmas", None)

# %%
checks.check("07.co2_france", None)

# %%
checks.check("07.ssd_lives", None)
