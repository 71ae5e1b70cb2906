"""The eager layer's op counts (labkit.predict.eager_ops) against torch's dispatcher.

A tiny transformers Llama, Qwen2 and GPT-2 block (configs built here, random weights, nothing downloaded) runs
forward and backward on the CPU under ``TorchDispatchMode``; every op that is not a view (``OpOverload.is_view``)
or ``_unsafe_view`` is counted. Two sizes of each block give the same counts: they are per-layer and structural.
CPU autocast keeps ``pow`` and ``layer_norm`` as the model's dtype and CPU dropout is not CUDA's fused kernel, so
the rows run with ``cuda=False`` and no dropout; the CUDA-only terms are checked by hand below.
"""

from __future__ import annotations

import pytest
from tiny_blocks import counted_pass, tiny_block

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

    class Ops(TorchDispatchMode):
        total = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.total += _launches(func)
            return func(*args, **(kwargs or {}))

    block, rope = tiny_block(family, dtype, h, ffn, 4)
    x = torch.randn(2, SEQ, h, dtype=dtype, requires_grad=True)
    return eager_ops.LayerOps(*counted_pass(block, rope, x, autocast, Ops()))


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
