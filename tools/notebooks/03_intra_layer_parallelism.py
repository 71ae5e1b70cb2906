# %% [markdown]
# # 03 · Intra-layer parallelism: Megatron 1D, 2D, 2.5D and 3D tensor parallelism
#
# **Why it matters.** Pipelines (notebook 02) cut a model *between* layers; when one
# layer is itself too big, or its activations are, the layer's matrices must be cut.
# Megatron-LM (Shoeybi et al., 2019) splits each MLP and attention block column-wise
# then row-wise over t GPUs (**1D**): weights shrink by t, but every GPU still keeps the
# full layer input, and each layer costs 4 all-reduces of b·s·h per micro-batch (two in
# forward, two in backward). Sequence parallelism (Korthikanti et al., 2022) splits what 1D
# replicates. **2D**
# (SUMMA, Optimus), **2.5D** (Tesseract) and **3D** (Bian et al.) split activations as
# well as weights over a grid of devices, and pay in more, smaller collectives.
#
# Everything below runs for real on local process groups (gloo on 127.0.0.1) and is
# measured beside the formulas (predicted by labkit). The picture (predicted): one
# GPT-3 175B layer's activations per GPU, by tensor-parallel degree.
#
# Symbols: b is the micro-batch size, s the sequence length, h the hidden size, a the attention
# heads, t the tensor-parallel degree, d the depth of 2.5D's grid (notebook 00's table lists every
# symbol of the lab).

# %%
from labkit import hardware
from labkit.intra_layer import costs, megatron, multidim, report, trends
from labkit.intra_layer import exercises as _exercises  # noqa: F401  (registers the 03.* exercises)
from labkit.intra_layer.panel import TensorParallelPanel
from labkit.predict.estimate import activation_bytes_per_layer
from labkit.shapes import model_shape
from labkit.teach import checks, plots

gpt3 = model_shape("gpt3-175b")
bars = {f"t={t}" + (" +sp" if sp else ""): {"activations": activation_bytes_per_layer(gpt3, 2048, 1, tp=t, sp=sp)}
        for t, sp in ((1, False), (2, False), (8, False), (8, True))}
plots.memory_bars(bars, title="GPT-3 175B, one layer, s=2048, b=1 (predicted)")

# %% [markdown]
# ## 1 · Predict
#
# The tiny GPT (2 layers, hidden h = 32, a = 4 heads, sequence s = 64, batch b = 2,
# dropout 0) is split over 4 ranks with Megatron 1D. **What share of the one-GPU
# activation bytes of a layer does each rank keep, without sequence parallelism?** (Think
# about what stays replicated, the LayerNorm inputs and the inputs of the column-parallel
# layers, and what is split, the attention scores included: with s = 64 and h = 32 they
# are not small.)

# %%
predicted_act_share_tp4 = None  # a fraction, e.g. 0.25

# %% [markdown]
# ## 2 · Measure: Megatron 1D and sequence parallelism with DTensor
#
# torch's `ColwiseParallel` / `RowwiseParallel` (and `SequenceParallel`) split the real
# model; labkit counts each rank's parameter bytes (local shards), the bytes autograd
# keeps per layer, and every collective of one forward and backward.

# %%
jobs = [{"sp": False}, {"sp": True}]
tp2, tp4 = megatron.run_jobs(jobs, 2), megatron.run_jobs(jobs, 4)
results = {"t=2": tp2[0], "t=2 +sp": tp2[1], "t=4": tp4[0], "t=4 +sp": tp4[1]}
tiny = results["t=2"][0]
print(f"tiny GPT: {tiny.model['n_layer']} layers, h = {tiny.model['d_model']}, a = {tiny.model['n_head']}, "
      f"s = {tiny.model['seq_len']}, b = {tiny.batch_size}, dropout {tiny.model['dropout']}")
print("measured: t=2 and t=4, each with and without sequence parallelism (the t=4 table follows the reveal)")

# %% [markdown]
# ## 3 · Explain
#
# `predicted` is labkit's count of what torch runs; `paper` is Korthikanti et al.'s
# per-layer formula and Megatron's 4 all-reduces of b·s·h per layer (the collective rows count
# the whole model, both of its layers: twice that). Korthikanti's
# s·b·h·(10 + 24/t + 5as/(ht)) bytes is for 16-bit values with 1-byte dropout masks.
# This run is fp32 (e = 4 bytes per value) with dropout 0, so torch keeps no masks, and
# the same count reads 4e·sbh (the two LayerNorm inputs and the inputs of the two
# column-parallel linears, whole on every rank) + 12e·sbh/t (Q, K, V, the projection
# input, the MLP's inner activations, split) + e·as²b/t (the attention scores); that is
# the `paper` row. The two differ only where the papers leave something out:
# LayerNorm's mean and 1/std per token, and the collectives of the embedding, the
# vocabulary-parallel loss and the optimizer step.

# %%
assert report.worst_megatron_error(results) == 0
share = results["t=4"][0].activation_bytes[0] / megatron.activation_bytes(1)["exact"]
print(checks.reveal_number(predicted_act_share_tp4, share, "Share kept per rank at t=4 (measured)", "", 1.0,
                           key="03.predict.act_share_tp4"))
print(report.megatron_table({k: v for k, v in results.items() if k.startswith("t=4")}))
one_gpu = megatron.activation_bytes(1)["exact"]
print(f"one process keeps {one_gpu:,.0f} B in layer 0 (predicted, the exact count): rank 0 keeps "
      + ", ".join(f"{k} {results[k][0].activation_bytes[0] / one_gpu:.3f}" for k in ("t=4", "t=4 +sp")) + " of it")
assert share > 1 / 4 and results["t=4 +sp"][0].activation_bytes[0] < results["t=4"][0].activation_bytes[0]
reference = megatron.single_process()
assert report.megatron_max_error(results, reference) < 1e-5
print("every rank's logits and gradients equal one process's within 1e-5 (absolute), at t=2 and t=4, with and"
      " without sequence parallelism")

# %% [markdown]
# Not 1/4: without sequence parallelism, the LayerNorm inputs and the inputs of the
# column-parallel linears (4e·sbh of the count above; with dropout, the masks too) stay
# whole on every rank. With it, they split too (`t=4 +sp` above), which is why
# Megatron-LM offers it beside tensor parallelism (opt-in, its `--sequence-parallel` flag).
#
# ## 4 · Beyond 1D: 2D, 2.5D and 3D, written by hand
#
# No library ships these modes for PyTorch process groups, so labkit writes them (see
# `labkit.intra_layer.multidim`): SUMMA broadcasts and reduces along the rows and columns
# of a q×q grid; 2.5D stacks d such grids and splits the batch over them; 3D splits over
# a q×q×q cube with all-gathers and reduce-scatters. **Predict:** on 8 devices, which of
# 1D, 2.5D (d=2, q=2) and 3D keeps the fewest activation bytes per device? Answer yes or
# no for each mode: if two tie for the fewest, say yes to both.

# %%
predicted_keeps_fewest = {"1d": None, "2.5d": None, "3d": None}  # "yes" or "no" for each

# %% [markdown]
# One MLP block (Linear h→4h, GeLU, Linear 4h→h), forward and backward, on 4 and on 8
# real processes (measured), beside labkit's count of the same algorithm (predicted).
# Bytes per device, fp32; `calls` counts collective calls (one all-reduce is one call). The
# design panel below also counts each call's sequential ring **messages**, the steps the
# link model charges a latency for: a ring all-reduce over P ranks is 2(P - 1) of them, an
# all-gather or a reduce-scatter P - 1.

# %%
runs4 = multidim.run_modes(4, [{"mode": "1d"}, {"mode": "2d"}])
runs8 = multidim.run_modes(8, [{"mode": "1d"}, {"mode": "2.5d", "depth": 2}, {"mode": "3d"}])
assert report.worst_multidim_error(runs4 + runs8) == 0
assert all(err < 1e-5 for ranks in runs4 + runs8 for err in multidim.max_error(ranks).values())
block = runs8[0][0]
one_device = costs.single_device(block["block"], block["batch"], block["hidden"], block["ffn"]).activation_bytes
fewest = min(r[0]["activation_bytes"] for r in runs8)
checks.reveal_claims(predicted_keeps_fewest, {r[0]["mode"]: r[0]["activation_bytes"] == fewest for r in runs8},
                     key="03.predict.keeps_fewest")

# %%
print(report.multidim_table(runs4 + runs8))
print("every mode's Y, dX, dW and db equal the unsplit computation within 1e-5 (absolute)")
print("activation bytes per device on 8 devices (measured):",
      ", ".join(f"{r[0]['mode']} {r[0]['activation_bytes']:,} B" for r in runs8),
      f"of the block's {one_device:,} B on one device (predicted)")
kept = {r[0]["mode"]: r[0]["activation_bytes"] for r in runs8}
assert kept["2.5d"] == kept["3d"] == one_device // 8 < kept["1d"]  # the tie, at 1/8, and 1D above it
calls = report.multidim_calls(runs4 + runs8)
assert calls["1d (P=4)"] == calls["1d (P=8)"] == 2 and calls["2d (q=2)"] == 2 * 2 * 3 * 2 + 2  # section 4's count

# %% [markdown]
# All byte columns above are bytes (B) per device for the whole MLP block, fp32. 2.5D
# with d = 2, q = 2 and 3D with q = 2 tie: 1/(d·q²) = 1/q³ = 1/8 of the block's
# activations on one device. 1D keeps more: its split parts shrink by 1/P, but the
# block's input X stays whole on every device.
#
# The published scaling (the Efficiency tables of Colossal-AI's documentation, one page
# per mode) is stated for **one linear layer** Y = XW + b, not for the MLP block, and its
# activation column is that layer's input X: weights per device 1/P, 1/q², 1/q², 1/q³ and
# activations 1, 1/q², 1/(dq²), 1/q³ of one device's. For 1D the "1" is exactly the
# replicated X. The table below is labkit's count for that single linear layer (the MLP's
# first, the one the runs above start with) beside the published ratios:

# %%
layouts = [("1d", 8, 1), ("2d", 16, 1), ("2.5d", 32, 2), ("3d", 8, 1), ("3d", 64, 1)]
print(report.published_table(layouts))
assert all(costs.ratios(m, p, 64, 64, 64, d)[k] == costs.published(m, p, d)[k]
           for m, p, d in layouts for k in ("parameters", "activations"))  # ours equal the published, row by row

# %% [markdown]
# The price is in collectives (the `calls` column). 1D issues one all-reduce per MLP block in
# forward and one in backward (a whole transformer layer, its attention block included, makes
# Megatron's four). 2D's SUMMA issues 2q broadcasts or reduces per matrix multiply, three
# multiplies per linear layer (one in forward, two in backward) and two linear layers per
# block, plus one all-reduce per bias gradient (at q = 2 that sums to the 2d row's `calls`); and
# the grid modes move blocks of the weights as well as of the activations.
#
# ## 5 · Scale: which mode wins, and where
#
# One GPT-3 175B MLP block (h = 12,288, b·s = 2,048 tokens, 16-bit) on A100s: compute
# time per device at half of the bf16 peak beside the fastest mode's communication (predicted by
# labkit's count and the alpha-beta link model), in one column for a group on NVLink and
# in one for a group whose every hop crosses InfiniBand HDR. NVLink joins only the 8
# GPUs of one DGX A100 server (its NVLink domain, from the catalogue): a 16- or 64-GPU
# group spans servers, and its ring runs at the speed of its slowest hop, the
# InfiniBand link between servers, so those cells are costed on `ib-hdr`.

# %%
a100, ib = hardware.gpu("A100-80GB"), hardware.link("ib-hdr")
links = [hardware.link("nvlink3"), ib]
print(f"{a100.name}: NVLink domain of {a100.nvlink_domain_gpus} GPUs")
print(report.winners([2, 4, 8, 16, 64], links, 2048, 12288, 4 * 12288, a100, ib))
gpt3_trends = trends.gpt3_block(report.winner_cells([2, 4, 8, 16, 64], links, 2048, 12288, 4 * 12288, a100, ib),
                                a100.nvlink_domain_gpus, "nvlink3", ib.name)
assert all(gpt3_trends.values()), gpt3_trends  # each claim of the text below

# %% [markdown]
# Inside one NVLink domain (up to 8 GPUs) communication is a small share of compute.
# Over InfiniBand it is a large share already at 8 GPUs, and past the domain, where
# NVLink no longer reaches, it exceeds compute: at 16 and 64 devices the GPUs wait
# longer than they compute. This is what Narayanan et al. (SC 2021, section 3.2,
# Takeaway #1) conclude from their analysis: **tensor parallelism up to the GPUs of one
# server, pipeline parallelism (one activation per micro-batch per stage boundary)
# across servers.**
#
# 1D wins every cell here because a GPT-3 block's weights (h × 4h) are larger than its
# activations at 2,048 tokens, and the grid modes move weight blocks. With many tokens
# and a small hidden size (65,536 tokens of h = 1,024: long sequences, or big
# micro-batches) the activations dominate, and the grid modes, which split them, win:

# %%
print(report.winners([8, 16, 64], links, 65536, 1024, 4 * 1024, a100, ib))
assert all(trends.grid_modes_win(report.winner_cells([8, 16, 64], links, 65536, 1024, 4 * 1024, a100, ib)).values())

# %% [markdown]
# ## 6 · Break it
#
# The grid modes do not run on every device count, and Megatron cannot split a head in
# two. labkit refuses such layouts before it starts a process, with the reason:

# %%
for bad in (lambda: costs.check("2d", 8, 64, 64, 256), lambda: costs.check("3d", 16, 64, 64, 256),
            lambda: megatron.run_tp(3)):
    try:
        bad()
    except Exception as err:  # LabkitError
        print(f"{type(err).__name__}: {err}")

# %% [markdown]
# And a layout that runs but stalls: 64-way tensor parallelism across InfiniBand spends
# more time communicating than computing (the table above): the GPUs wait.
#
# ## 7 · Design: pick a mode
#
# Mode, device count, hidden size, tokens per micro-batch, the link inside a server and
# the link between servers (predicted; NVLink reaches 8 GPUs, larger groups cross the
# link between servers). Find the mode with the least communication on 16 devices;
# then the one with the least memory. Are they the same?
#
# **Design task (checked):** keep one GPT-3 175B MLP block (h = 12,288, 2,048 tokens,
# 16-bit) on A100 servers (`nvlink3` inside a server of 8 GPUs, `ib-hdr` between) in at
# most 375 MB (375e6 B) per GPU, with under 6 ms of communication for its forward and backward.
# Two results of this notebook decide it: what each mode keeps whole on every device
# (section 4) and what happens to a group larger than 8 GPUs (section 5). Press **Check
# my design**: it says whether the goal is met, and if not, what is still missing.

# %% tags=["nbval-ignore-output"]
from labkit.practice import design  # noqa: E402

tensor_panel = TensorParallelPanel(mode="2d", devices=16, hidden=12288, batch=2048, link="nvlink3")
tensor_panel.set_task(design.task("03"))

# %% [markdown]
# ## Build it yourself: Megatron's tensor-parallel layers
#
# Write Megatron's two conjugate operators yourself, forward **and** backward, as `torch.autograd.Function`:
# f (`CopyToParallel`: identity forward, all-reduce of the gradient backward) and g (`ReduceFromParallel`:
# all-reduce forward, identity backward). On them build `column_shard`, `row_shard`, `ColumnParallelLinear`,
# `RowParallelLinear` and `ParallelMLP`. `build.open_stub` copies a stub to `build/tp_layers.py` beside this
# notebook (once; it never overwrites your work).
#
# `build.check_build` runs your module on **2, 4 and 3 real ranks** (gloo), with shapes drawn per run, beside
# the dense `nn.Linear` block, which this process computes itself, and checks f and g one by one (also on a
# sliced, non-contiguous tensor), the two weight splits (rank r's contiguous block), then the MLP's output,
# input gradient, weight gradients and its collectives (one all-reduce of tokens x h each way): equal to the
# dense block within 1e-5 in float32, not bit for bit, because the row-parallel layer adds its partial sums in
# another order than one matmul does. Typical bugs (a missing or an extra all-reduce, the bias added before the
# all-reduce, a missing `.contiguous()`, the wrong dimension split, a world size hard-coded to 2, a collective
# only some ranks call) are named in the feedback; each failed try shows one more hint. Below it runs on the
# blank stub: "not written yet".

# %%
from labkit.practice import build

tp_path = build.open_stub("03.build.tp_layers")
print(tp_path)

# %%
build.check_build("03.build.tp_layers", tp_path)

# %% tags=["nbval-ignore-output"]
# When your module passes: seconds per step and bytes all-reduced, your MLP beside torch's DTensor
# ColwiseParallel/RowwiseParallel (predicted: 2 all-reduces of tokens x h floats; times are shown, never checked).
# from labkit.practice.build import tp_layers as build_tp
# build_tp.benchmark(tp_path)

# %% [markdown]
# ## Build it yourself: sequence parallelism and the attention block
#
# Megatron's tensor parallelism leaves the LayerNorms, residual adds and dropout replicated: every rank holds
# all s tokens there. Korthikanti et al. (2022, section 4.2.2) cut them along the sequence instead: each rank
# keeps s/t tokens, g all-gathers the sequence before a column-parallel linear (its backward reduce-scatters)
# and g-bar reduce-scatters after a row-parallel one (its backward all-gathers): the same bytes as the two
# all-reduces, since an all-reduce is a reduce-scatter plus an all-gather. Write g, g-bar and
# `SequenceParallelBlock` for labkit's transformer layer: whole heads per rank for attention, a contiguous
# block of the MLP, the LayerNorm and row-bias gradients summed over the ranks after backward.
#
# `build.check_build` runs it on **2 and 4 real ranks** with shapes drawn per run, beside the dense layer:
# g and g-bar alone, then the layer's output, input gradient, parameters and gradients (within 1e-4), and its
# collectives (2 all-gathers and 2 reduce-scatters of b x s x h each way, no all-reduce). Below it runs on the
# blank stub.

# %%
sp_path = build.open_stub("03.build.sp_block")
print(sp_path)

# %%
build.check_build("03.build.sp_block", sp_path)

# %% [markdown]
# ## 8 · Check yourself

# %%
checks.check("03.allreduces", None)

# %%
checks.check("03.act_share_2d", None)

# %%
checks.check("03.gpt3_tp8_sp_gb", None)

# %% [markdown]
# **Reasoning across results.** The next answer is in no single table: put together the
# opening figure (one GPT-3 175B layer's activations at t = 1, 2 and 8, and at t = 8 with
# sequence parallelism) and what section 3 showed sequence parallelism splits (the terms
# 1D alone keeps whole on every rank). Answer with a tensor-parallel degree.

# %%
from labkit.practice import reasoning  # noqa: E402, F401 - importing it registers the reasoning exercises

checks.check("03.reason.tp_for_half_gb", None)

# %% [markdown]
# **Coding exercise.** Split an MLP the way Megatron does. Write `mlp_shards(w1, w2, rank, t)`
# for the block y = GeLU(x w1ᵀ) w2ᵀ in `nn.Linear` layout (`w1` is [4h, h], `w2` is
# [h, 4h]): return rank `rank`'s part of `w1` and of `w2`, each 1/t of the whole, such
# that the t ranks' partial outputs GeLU(x w1_rᵀ) w2_rᵀ add up to y. The check runs your
# split on real tensors for t = 2, 4 and 8: it computes every rank's partial output,
# adds them up (the sum is what the all-reduce after the row-parallel linear returns on
# every rank; here the ranks run one after another in one process), and compares the
# sum with the unsplit MLP.

# %%
from labkit import practice  # noqa: E402


def mlp_shards(w1, w2, rank, t):
    raise NotImplementedError  # your code here


practice.check_code("03.code.mlp_shards", mlp_shards)

# %% [markdown]
# **Handing in.** Every answer, committed prediction and check result is appended as you go to
# `labkit-journal.jsonl` beside this notebook, so a kernel restart loses nothing. To hand them in,
# run `checks.export_answers("answers-03.json", student="your name", notebook="03")` in a new
# cell: it writes every try in order with its verdict, and a summary scored by your committed guesses.
