# %% [markdown]
# # 09 · Choosing a strategy: the summary table, the selection flow, and a capstone
#
# **Why it matters.** Each earlier notebook taught one technique and measured it. A real
# training run combines several: data parallelism with ZeRO, tensor parallelism inside a
# node, a pipeline across nodes, recompute, mixed precision, sometimes offload. Which
# combination depends on the model, the batch and the hardware, and on the goal: to fit
# at all, to be fastest, cheapest or greenest. This notebook puts every technique's memory,
# communication and extra compute in one table, from the same models the earlier notebooks
# checked against measurements, and searches the combinations for a cluster you pick.

# %%
from labkit import checks
from labkit.advisor import capstone, flow, search, summary
from labkit.advisor import exercises as _exercises  # noqa: F401  (registers the 09.* exercises)
from labkit.advisor.report import advice_text
from labkit.compare import memory_comparison, setup_for
from labkit.measure import measure_step
from labkit.model import GPTConfig
from labkit.shapes import ModelShape
from labkit.train import TrainConfig, Trainer, seed_everything

seed_everything(0)

# %% [markdown]
# ## 1 · The models the advisor stands on, measured once more
#
# The advisor's memory figures come from `labkit.estimate` (ZeRO's model states,
# Korthikanti et al.'s activations). One real mixed-precision step of the tiny GPT, measured
# beside the same formulas:

# %%
cfg = TrainConfig(model=GPTConfig(vocab_size=35, n_layer=2, d_model=64, seq_len=32), batch_size=4,
                  precision="bf16-mixed")
trainer = Trainer(cfg)
trainer.step()
comparison = memory_comparison(measure_step(trainer), setup_for(ModelShape.from_config(cfg.model), 4, "bf16-mixed"))
print(comparison)
assert comparison.worst_error < 0.02

# %% [markdown]
# Model states agree byte for byte; the activations' 0.36% are small tensors Korthikanti et
# al.'s formula rounds away (each LayerNorm's mean and 1/σ, position ids, the loss); notebooks
# 01 and 05 account for them term by term.
#
# ## 2 · The summary table
#
# GPT-3 175B (s = 2,048) on one node of 8 A100-80GB, each technique alone (predicted by the
# models validated in notebooks 01-07). **Predict:** which single technique cuts the memory
# per GPU the most: ZeRO-3, 1F1B pipeline, tensor parallel, full recompute or ZeRO-Infinity?

# %%
predicted_best_single = None  # one of the names above

# %%
rows = summary.summary("gpt3-175b", "A100-80GB", 8)
print(summary.summary_table(rows))
names = {"ZeRO-3": "ZeRO-3", "pipeline 1F1B": "1F1B pipeline", "tensor parallel 1D (Megatron)": "tensor parallel",
         "recompute full": "full recompute", "offload to NVMe (ZeRO-Infinity)": "ZeRO-Infinity"}
candidates = {names[r.technique]: r.memory_bytes for r in rows if r.technique in names}
smallest = min(candidates, key=candidates.get)
print(f"you said {predicted_best_single}; smallest memory per GPU: {smallest} "
      f"({candidates[smallest] / 1e9:,.0f} GB)")

# %% [markdown]
# No single technique fits GPT-3 on 80 GB GPUs with 8 of them; combinations on many GPUs do.
#
# ## 3 · Break it, then search: GPT-3 on 1,024 A100s
#
# Megatron-LM's example configuration for GPT-3 175B (the script
# `examples/pretrain_gpt3_175B.sh` in NVIDIA/Megatron-LM) asks for 128 nodes of 8 GPUs:
# tensor parallel 8 inside each node, a 16-stage pipeline across nodes, so data parallel 8,
# micro-batch 1, global batch 1,536, sequences of 2,048, activation checkpointing (full
# recompute). It is a configuration, not a published run: Narayanan et al. (SC 2021)
# estimate 34 days for GPT-3 on 1,024 A100s without giving a layout, and their own 175B
# runs use tensor 8 × pipeline 12. Pure data parallelism would need every GPU to hold the
# whole model. The advisor judges every combination of dp, tp, pp, ZeRO stage, recompute,
# offload, precision and micro-batch that fills 1,024 GPUs (predicted):

# %%
advice = search.advise("gpt3-175b", 1536, "A100-80GB", 1024, "fastest", seq=2048)
print(advice_text(advice, top=5))
pure_dp = advice.find(dp=1024, tp=1, pp=1, zero_stage=0, recompute="none", offload="none", micro_batch=1,
                      precision="bf16-mixed", optimizer_bits=32)
megatron = advice.find(dp=8, tp=8, pp=16, zero_stage=0, recompute="full", offload="none", micro_batch=1,
                       precision="bf16-mixed", optimizer_bits=32)
print(f"\npure data parallel: rejected: {pure_dp.reason}")
print(f"Megatron-LM's example configuration: feasible {megatron.feasible}, {megatron.memory_bytes / 1e9:.1f} GB per GPU, "
      f"{megatron.step_s:.2f} s a step")
assert megatron.feasible and not pure_dp.feasible

# %% [markdown]
# The step-time model is the simplest one that tells these plans apart: compute at an
# assumed 50% of peak, the pipeline bubble (p-1)/m, tensor-parallel all-reduces over
# NVLink, the data-parallel all-reduce over InfiniBand partly hidden behind backward. It is
# an assumption-laden ranking, not a benchmark: plans within a few per cent are ties.
#
# ## 4 · The selection flow
#
# The seed's flow asks its questions in order: does the model fit one GPU; do its states fit
# once ZeRO shards them; tensor parallel inside an NVLink node, a pipeline across slower
# links, then recompute, offload and lower precision when memory is still short. The advisor
# does not walk the flow: it judges every plan. So each question is answered from its search:
# the fit questions from the bytes per GPU it computed, each choice by setting the best plan
# that uses the technique beside the best one that does not (orange: yes).

# %%
print(flow.explain(advice))
flow.draw(advice, title=f"GPT-3 on 1,024 A100s: {advice.best.layout.label}")

# %% [markdown]
# ## 5 · Capstone: propose a plan
#
# The task: GPT-3 175B, 300 bn tokens, global batch 1,536, s = 2,048, on 1,024 A100-80GB,
# a budget of $4.0 M at on-demand prices. Propose a plan (fields of `Layout`: dp, tp, pp,
# micro_batch, zero_stage, recompute, offload, precision, optimizer_bits); the advisor grades it
# against its best. Megatron-LM's example configuration is filled in; try to beat it.

# %%
my_plan = {"dp": 8, "tp": 8, "pp": 16, "micro_batch": 1, "recompute": "full"}

# %%
capstone.grade(my_plan)

# %% [markdown]
# ## 6 · Design: your model, your cluster
#
# Change the model, the GPU and its count, the batch and the goal, and read the advisor's
# ranked plans and the reasons it rejected the rest (predicted). Try Llama-2 70B on 64
# H100s, goal "greenest".

# %% tags=["nbval-ignore-output"]
from labkit.advisor.panel import AdvisorPanel

AdvisorPanel()

# %% [markdown]
# The same from a terminal: `labkit advise --model llama2-70b --gpu H100-SXM --gpus 64
# --batch 512 --seq 4096 --goal greenest --json`.
#
# ## 7 · Check yourself

# %%
checks.check("09.pure_dp_gb", None)

# %%
checks.check("09.megatron_gb", None)

# %%
checks.check("09.megatron_bubble", None)

# %%
checks.check("09.best_step_s", None)
