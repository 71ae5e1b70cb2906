"""A model's parameter tensors, one element count each, in the order its module registers them.

The optimizer step works tensor by tensor (torch's single-tensor AdamW) or on all of them at once
(foreach), so its temporaries depend on the largest tensor and on its neighbour in this order, not
on the parameter count alone (``labkit.predict.step_peak``). Two layouts cover the shipped families:
GPT-2 and the lab's tiny GPT (``wte``, ``wpe``, per layer ``ln_1``, ``c_attn``, ``c_proj``, ``ln_2``,
``c_fc``, ``c_proj``, then ``ln_f``; weights tied), and the Llama family (Llama, Mistral, Qwen2:
``embed_tokens``, per layer Q, K, V, O, gate, up, down and two RMSNorms, the final norm, ``lm_head``
when untied). Tied weights appear once, as ``model.parameters()`` yields them. Torch-free.
"""

from __future__ import annotations

from functools import lru_cache

from labkit.shapes import ModelShape


def _gpt2_layer(s: ModelShape) -> list[int]:
    h, f = s.hidden, s.ffn_size
    return [h, h, 3 * h * h, 3 * h, h * h, h, h, h, h * f, f, f * h, h]


def _llama_layer(s: ModelShape) -> list[int]:
    h, f, kv = s.hidden, s.ffn_size, s.kv_hidden
    out = []
    for width in (h, kv, kv):
        out += [width * h] + ([width] if s.qkv_bias else [])
    return out + [h * h, f * h, f * h, h * f, h, h]


@lru_cache(maxsize=256)
def parameter_tensors(shape: ModelShape) -> tuple[int, ...]:
    """Element counts of every parameter tensor, in registration order (their sum is ``shape.params``)."""
    h, v = shape.hidden, shape.vocab
    if shape.gated:
        out = [v * h] + _llama_layer(shape) * shape.layers + [h]
    else:
        out = [v * h] + ([shape.seq * h] if shape.learned_pos else []) + _gpt2_layer(shape) * shape.layers + [h, h]
    if not shape.tied:
        out.append(v * h)
    return tuple(out)
