"""A causal-LM loss computed over sequence chunks: the output layer and cross-entropy run ``chunks`` at a time.

transformers' ``ForCausalLMLoss`` makes the whole (b, s, V) logits, upcasts them to fp32 and keeps the fp32
log-probabilities for backward: at Llama's 32,000-word vocabulary and 8K tokens that is 1 GB a sequence,
and in bf16 two more copies are alive at the loss. Fine-tuning frameworks cut it: Liger-Kernel's fused
linear cross-entropy and torchtune's ``CEWithChunkedOutputLoss`` compute the output projection and the loss
over sequence chunks (Hsu et al., "Liger Kernel", 2024; Wijmans et al., "Cut Your Losses in Large-Vocabulary
Language Models", 2024). The lab's version, written here for the lab's ``Trainer(loss=...)``: the decoder's
hidden states are split into ``chunks`` pieces along the sequence, and each piece's projection and summed
cross-entropy run inside ``torch.utils.checkpoint`` (non-reentrant), so nothing of a chunk's logits is kept:
in backward each chunk is recomputed and differentiated alone. The checkpoint saves the chunk's inputs
(views of the hidden states and of the padded labels, storages kept anyway). Labels are shifted as
transformers shifts them (padded by one with -100, ignored), and the loss is the mean over the b*(s-1) shifted
targets: every label of the batch is taken as real (padding labelled -100 inside the batch would be under-weighted),
because counting them needs their values, which a fake tensor does not have.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from labkit.errors import LabkitError, require_positive


def _chunk_loss(hidden: torch.Tensor, labels: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    logits = F.linear(hidden, weight).float()
    return F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-100, reduction="sum")


def chunked_loss(chunks: int):
    """A ``loss(model, batch)`` for ``labkit.rig.train.Trainer``: a transformers causal LM's mean next-token
    cross-entropy over ``chunks`` sequence chunks (1: one chunk, still without the fp32 logits kept)."""
    require_positive("loss_chunks", chunks)

    def loss(model: torch.nn.Module, batch) -> torch.Tensor:
        head = model.get_output_embeddings()
        if head is None or getattr(head, "bias", None) is not None:
            raise LabkitError("loss_chunks needs a causal LM whose output layer is a bias-free linear layer")
        ids, labels = batch["input_ids"], batch["labels"]
        hidden = model.get_decoder()(input_ids=ids, use_cache=False).last_hidden_state
        shifted = F.pad(labels, (0, 1), value=-100)[:, 1:]
        total = hidden.new_zeros((), dtype=torch.float32)
        for h, y in zip(hidden.chunk(chunks, dim=1), shifted.chunk(chunks, dim=1), strict=True):
            total = total + checkpoint(_chunk_loss, h, y, head.weight, use_reentrant=False)
        return total / (ids.shape[0] * (ids.shape[1] - 1))

    return loss
