"""The eager layer's element-wise bytes (labkit.predict.eager_elementwise) against torch's dispatcher.

A tiny transformers Llama, Qwen2 and GPT-2 block (configs built here, random weights, nothing downloaded) runs
forward and backward on the CPU under ``TorchDispatchMode``; every aten op that is not a GEMM, the attention
kernel or a view adds the bytes of its tensors (an expanded input counted once per stored element). Two batch
sizes at one sequence length are differenced, so what remains is the bytes per token (the per-parameter
weight casts and weight-gradient casts drop out). CPU autocast keeps ``pow`` in bf16 and CPU dropout is not
the fused CUDA kernel, so the GPT-2 rows run with ``cuda=False`` and no dropout; the CUDA-only terms are
checked by hand below.
"""

from __future__ import annotations

import math

import pytest
from tiny_blocks import counted_pass, tiny_block

from labkit.predict import eager_elementwise as ew
from labkit.shapes import ModelShape

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

NOT_ELEMENTWISE = {"mm", "addmm", "bmm", "_scaled_dot_product_flash_attention_for_cpu",
                   "_scaled_dot_product_flash_attention_for_cpu_backward", "detach", "t", "view", "_unsafe_view",
                   "transpose", "expand", "unsqueeze", "slice", "split", "split_with_sizes", "permute", "alias",
                   "as_strided", "select", "squeeze", "reshape", "lift_fresh"}
SEQ = 16


def _stored(t) -> int:
    return math.prod(n for n, st in zip(t.shape, t.stride(), strict=True) if st != 0) * t.element_size()


def _measured(family: str, dtype, autocast: bool) -> ew.LayerBytes:
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten

    class Bytes(TorchDispatchMode):
        total = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if func._overloadpacket.__name__ not in NOT_ELEMENTWISE:
                ts = [t for t in tree_flatten((args, kwargs, out))[0] if isinstance(t, torch.Tensor)]
                self.total += sum(_stored(t) for t in ts)
            return out

    block, rope = tiny_block(family, dtype, 64, 176, 8)
    runs = []
    for b in (2, 4):
        block.zero_grad(set_to_none=True)  # each run's weight gradients written, not added into the last run's
        x = torch.randn(b, SEQ, 64, dtype=dtype, requires_grad=True)
        runs.append(counted_pass(block, rope, x, autocast, Bytes()))
    tokens = 2 * SEQ
    return ew.LayerBytes((runs[1][0] - runs[0][0]) / tokens, (runs[1][1] - runs[0][1]) / tokens)


TINY = {"llama": ModelShape("tiny-llama", 1, 64, 8, 128, SEQ, ffn=176, kv_heads=2, gated=True, norm="rmsnorm",
                            bias=False, tied=False, learned_pos=False, dropout=False),
        "qwen2": ModelShape("tiny-qwen2", 1, 64, 8, 128, SEQ, ffn=176, kv_heads=2, gated=True, norm="rmsnorm",
                            bias=False, qkv_bias=True, tied=True, learned_pos=False, dropout=False),
        "gpt2": ModelShape("tiny-gpt2", 1, 64, 8, 128, SEQ, dropout=False)}


@pytest.mark.parametrize("family", ["llama", "qwen2", "gpt2"])
@pytest.mark.parametrize(("weights", "autocast"), [("float32", True), ("bfloat16", True), ("bfloat16", False)])
def test_counted_bytes_match_the_dispatcher(family, weights, autocast):
    dtype = torch.float32 if weights == "float32" else torch.bfloat16
    measured = _measured(family, dtype, autocast)
    prec = ew.Precision(ew.DTYPE_BYTES[weights], autocast, dropout=False, cuda=False)
    counted = ew.layer_bytes(TINY[family], prec)
    assert (counted.forward, counted.backward) == pytest.approx((measured.forward, measured.backward), abs=0.5)
