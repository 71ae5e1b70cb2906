"""The named mistakes of notebook 05's fine-tuning predictions (section 7b), from labkit's own figures.

Kept beside ``labkit.teach.prediction_mistakes`` (which turns each entry into its ``Judging`` and holds the
rules for every other prediction) so that module stays under the lab's 300 lines. Every wrong value is
computed by ``labkit.predict.finetune_fit.seven_b_figures`` for the question's constants (Llama-2 7B, LoRA
r = 16 on W_q and W_v, micro-batch 1, 1,024 tokens, bf16 mixed), in GB (1e9 bytes), never typed in.
"""

from __future__ import annotations

from labkit.predict.finetune_fit import seven_b_figures

_F = {k: v / 1e9 for k, v in seven_b_figures().items()}

# key -> (unit shown, relative tolerance, ((mistake, wrong value in GB), ...), unit family of slips)
FINETUNE: dict[str, tuple[str, float, tuple[tuple[str, float], ...], str]] = {
    "05.predict.lora_7b_gb": ("GB", 0.05, (
        ("the frozen layers' activations forgotten: the gradient still passes back through every frozen layer, "
         "which keeps what its norms, attention and activation function need",
         _F["lora peak"] - _F["lora activations"]),
        ("AdamW states for the frozen weights too: only the adapters are trained, so only they have master "
         "weights and moments", _F["lora peak"] + _F["adam states for frozen"]),
        ("a full fine-tune's 16 bytes a parameter: LoRA keeps the frozen base once, at 2 bytes",
         _F["full fine-tune states"]),
    ), "B"),
    "05.predict.qlora_base_gb": ("GB", 0.05, (
        ("4-bit without scales: every block of 64 weights also keeps its fp32 absmax, 0.5 bits a weight",
         _F["qlora base without scales"]),
        ("every weight at 4 bits: QLoRA keeps the embeddings, norms and output layer in 16 bits", _F["all 4-bit"]),
        ("the 16-bit base: QLoRA stores the frozen matrices in NF4", _F["16-bit base"]),
    ), "B"),
}
