# %% [markdown]
# ## 7b · Fine-tuning a 7B model on one card: LoRA and QLoRA
#
# A full fine-tune keeps 16 bytes of model states a parameter (section 4), far beyond a 24 GB
# card for a 7B model. LoRA (Hu et al. 2021) freezes every weight and trains, beside chosen
# matrices W (in × out), a low-rank product B·A: r·(in + out) parameters each, the only ones
# with gradients and AdamW states. QLoRA (Dettmers et al. 2023) also stores the frozen
# matrices in 4-bit NF4, in blocks of 64 weights with one fp32 scale each.
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
# Every category agrees to the byte. The frozen base is held once, at 2 bytes a weight; only the
# adapters have gradients and optimizer states. The activations are not those of full training:
# a frozen linear layer keeps no input (only its weight's gradient would need it), and nothing
# before the first adapter needs a gradient at all, so the first layer keeps less than the
# second. But the gradient still passes back through every frozen layer, so the norms, the
# attention kernel and the activation function keep what they keep in full training. What
# one layer keeps, at the slice's 32 tokens:

# %%
print(text_table(["what layer 1 keeps", "bytes (predicted)"],
                 [[t.role, f"{t.bytes:,.0f}"] for t in layer_terms(llama7b, lora, 32, 1, 2)]))
print(f"measured: layer 0 {slice_7b.layers[0][0]:,} B, layer 1 {slice_7b.layers[1][0]:,} B")

# %% [markdown]
# **Scale.** The whole model, 32 layers at 1,024 tokens, on an RTX 4090: labkit's model, the
# same terms as the slice.

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
# The sequence is what breaks it: the frozen layers' activations grow with every token, while a
# higher rank or more targets add only adapters, their gradients and their states. Gradient
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
