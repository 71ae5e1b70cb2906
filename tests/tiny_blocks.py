"""One tiny transformers decoder block and one counted forward and backward through it: what the tests of
``labkit.predict.eager_elementwise`` and ``eager_ops`` hold against torch's dispatcher.

The block's config is ``labkit.shapes.hf_models``' (``small_spec``, ``hf_config_object``): random weights, sdpa,
no dropout, nothing downloaded. A count is any ``TorchDispatchMode`` with a ``total`` it adds to.
"""

from __future__ import annotations

import torch

from labkit.shapes.hf_models import hf_config_object, small_spec


def tiny_block(family: str, dtype: torch.dtype, hidden: int, ffn: int, heads: int):
    """One decoder block of ``family`` (GPT-2: its MLP at 4 h, the transformers default) in train mode at ``dtype``,
    and its rotary embedding (None for GPT-2's learned positions)."""
    from transformers.models.gpt2.modeling_gpt2 import GPT2Block
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRotaryEmbedding
    from transformers.models.qwen2.modeling_qwen2 import Qwen2DecoderLayer, Qwen2RotaryEmbedding

    torch.manual_seed(0)
    cfg = hf_config_object(small_spec(family, 1, hidden, heads, 2, 4 * hidden if family == "gpt2" else ffn, 64),
                           "sdpa", dropout=0.0)
    if family == "gpt2":
        return GPT2Block(cfg, 0).to(dtype).train(), None
    layer, rope = {"llama": (LlamaDecoderLayer, LlamaRotaryEmbedding),
                   "qwen2": (Qwen2DecoderLayer, Qwen2RotaryEmbedding)}[family]
    return layer(cfg, 0).to(dtype).train(), rope(cfg)


def counted_pass(block, rope, x: torch.Tensor, autocast: bool, count) -> tuple[int, int]:
    """``count.total`` over the block's forward (under CPU autocast bf16 when ``autocast``; the rotary embedding's
    cos and sin made before counting) and over its backward from a random output gradient."""
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        extra = {}
        if rope is not None:
            pos = torch.arange(x.shape[1])[None].expand(x.shape[0], x.shape[1])
            extra = {"position_embeddings": tuple(t.detach() for t in rope(x, pos))}
        count.total = 0
        with count:
            y = block(x, **extra)
    forward = count.total
    y = y[0] if isinstance(y, tuple) else y
    grad = torch.randn_like(y)
    count.total = 0
    with count:
        y.backward(grad)
    return forward, count.total
