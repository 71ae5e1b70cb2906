"""The eager layer's op counts (labkit.predict.eager_ops) against torch's dispatcher.

A tiny transformers Llama, Qwen2 and GPT-2 block (configs built here, random weights, nothing downloaded) runs
forward and backward on the CPU under ``TorchDispatchMode``; every op that is not a view (``OpOverload.is_view``)
or ``_unsafe_view`` is counted. Two sizes of each block give the same counts: they are per-layer and structural.
CPU autocast keeps ``pow`` and ``layer_norm`` as the model's dtype and CPU dropout is not CUDA's fused kernel, so
the rows run with ``cuda=False`` and no dropout; the CUDA-only terms are checked by hand below.
"""

from __future__ import annotations

import pytest

from labkit.predict import eager_ops
from labkit.predict.eager_elementwise import DTYPE_BYTES, Precision
from labkit.shapes import ModelShape
from labkit.shapes.hf_config import shape_from_hf_config

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

SEQ = 8


def _launches(func) -> bool:
    return not (func.is_view or func._overloadpacket.__name__ == "_unsafe_view")


def _counted(family: str, dtype, autocast: bool, h: int, ffn: int) -> eager_ops.LayerOps:
    from torch.utils._python_dispatch import TorchDispatchMode
    from transformers import GPT2Config, LlamaConfig, Qwen2Config
    from transformers.models.gpt2.modeling_gpt2 import GPT2Block
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRotaryEmbedding
    from transformers.models.qwen2.modeling_qwen2 import Qwen2DecoderLayer, Qwen2RotaryEmbedding

    class Count(TorchDispatchMode):
        n = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            Count.n += _launches(func)
            return func(*args, **(kwargs or {}))

    torch.manual_seed(0)
    x = torch.randn(2, SEQ, h, dtype=dtype, requires_grad=True)
    extra = {}
    if family == "gpt2":
        cfg = GPT2Config(n_embd=h, n_head=4, n_layer=1, vocab_size=64, resid_pdrop=0.0, attn_pdrop=0.0,
                         embd_pdrop=0.0, bos_token_id=0, eos_token_id=0)
        cfg._attn_implementation = "sdpa"
        block = GPT2Block(cfg, 0).to(dtype)
    else:
        kind = LlamaConfig if family == "llama" else Qwen2Config
        cfg = kind(hidden_size=h, intermediate_size=ffn, num_attention_heads=4, num_key_value_heads=2,
                   num_hidden_layers=1, vocab_size=64)
        cfg._attn_implementation = "sdpa"
        layer, rope = ((LlamaDecoderLayer, LlamaRotaryEmbedding) if family == "llama"
                       else (Qwen2DecoderLayer, Qwen2RotaryEmbedding))
        block = layer(cfg, 0).to(dtype)
        pos = torch.arange(SEQ)[None].expand(2, SEQ)
        extra = {"position_embeddings": tuple(t.detach() for t in rope(cfg)(x, pos))}
    block.train()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        Count.n = 0
        with Count():
            y = block(x, **extra)
    fwd = Count.n
    y = y[0] if isinstance(y, tuple) else y
    grad = torch.randn_like(y)
    Count.n = 0
    with Count():
        y.backward(grad)
    return eager_ops.LayerOps(fwd, Count.n)


TINY = {"llama": dict(ffn=0, kv_heads=2, gated=True, norm="rmsnorm", bias=False, tied=False, learned_pos=False),
        "qwen2": dict(ffn=0, kv_heads=2, gated=True, norm="rmsnorm", bias=False, qkv_bias=True, learned_pos=False),
        "gpt2": dict()}


@pytest.mark.parametrize("family", ["llama", "qwen2", "gpt2"])
@pytest.mark.parametrize(("weights", "autocast"), [("float32", True), ("bfloat16", True), ("bfloat16", False)])
def test_counted_ops_match_the_dispatcher_at_two_sizes(family, weights, autocast):
    dtype = torch.float32 if weights == "float32" else torch.bfloat16
    prec = Precision(DTYPE_BYTES[weights], autocast, dropout=False, cuda=False)
    for h, ffn in ((32, 88), (64, 176)):
        kw = TINY[family] | ({"ffn": ffn} if TINY[family] else {})
        shape = ModelShape(f"tiny-{family}", 1, h, 4, 64, SEQ, dropout=False, **kw)
        assert eager_ops.layer_ops(shape, prec) == _counted(family, dtype, autocast, h, ffn)


def test_the_three_eager_models_counts_under_cuda_autocast() -> None:
    """fp32 weights under CUDA autocast (the h200-eager runs): the Llamas as on the CPU; GPT-2 medium adds
    gelu_new's fp32 casts (2 forward, 5 backward) and its two fused dropouts (one op each way)."""
    ops = {m: eager_ops.layer_ops(shape_from_hf_config(m), Precision(4)) for m in
           ("tinyllama-1.1b", "qwen2-1.5b", "gpt2-medium")}
    assert ops == {"tinyllama-1.1b": eager_ops.LayerOps(48, 87), "qwen2-1.5b": eager_ops.LayerOps(51, 93),
                   "gpt2-medium": eager_ops.LayerOps(27 + 2 + 2, 41 + 5 + 2)}
