"""The engines' model presets as shapes: torchtitan's ``[model] name`` + ``flavor``.

torchtitan builds its model from a name and a flavor (``torchtitan/models/llama3/__init__.py``, ``llama3_args``,
at commit 238fa99 of pytorch/torchtitan, the last with TOML job configs): ``dim``, ``n_layers``, ``n_heads``,
``n_kv_heads``, ``ffn_dim_multiplier``, ``multiple_of``, ``vocab_size`` (default 128,256 in
``models/llama3/model/args.py``). The feed-forward width is not stored; torchtitan's ``FeedForward`` derives it
(:func:`llama_ffn`): 2/3 of 4 x dim, times the multiplier, rounded up to ``multiple_of``. The 8B and 70B flavors
give labkit's own ``llama3-8b`` and ``llama3-70b`` presets (``datasets/models.toml``; tested). Megatron-LM has no
named presets: its example scripts (``examples/gpt3/train_gpt3_175b_distributed.sh``,
``examples/llama/train_llama3_8b_h100_fp8.sh``) spell the model out in flags, which the Megatron reader takes.
"""

from __future__ import annotations

from dataclasses import replace

from labkit.errors import LabkitError
from labkit.shapes import ModelShape, model_shape

LLAMA3_VOCAB = 128256
SOURCE = "pytorch/torchtitan 238fa99, torchtitan/models/llama3/__init__.py (llama3_args)"
# flavor: (dim, n_layers, n_heads, n_kv_heads or None, ffn_dim_multiplier or None, multiple_of, vocab_size)
LLAMA3 = {
    "debugmodel": (256, 6, 16, None, None, 256, 2048),
    "8B": (4096, 32, 32, 8, 1.3, 1024, LLAMA3_VOCAB),
    "70B": (8192, 80, 64, 8, 1.3, 4096, LLAMA3_VOCAB),
    "405B": (16384, 126, 128, 8, 1.2, 4096, LLAMA3_VOCAB),
}
LABKIT_NAME = {"8B": "llama3-8b", "70B": "llama3-70b"}
MODEL_NAMES = ("llama3",)


def llama_ffn(dim: int, multiplier: float | None, multiple_of: int) -> int:
    """torchtitan's (and Meta's reference) SwiGLU width: int(2/3 x 4 dim), x multiplier, rounded up."""
    hidden = int(2 * 4 * dim / 3)
    if multiplier is not None:
        hidden = int(multiplier * hidden)
    return multiple_of * ((hidden + multiple_of - 1) // multiple_of)


def torchtitan_shape(name: str, flavor: str, seq: int) -> ModelShape:
    """The shape of torchtitan's model ``name`` + ``flavor`` at ``seq`` positions."""
    if name not in MODEL_NAMES:
        raise LabkitError(f"model.name must be one of {', '.join(MODEL_NAMES)} (torchtitan's dense Llama; got "
                          f"{name!r}); or give the model with --hf-config")
    if flavor not in LLAMA3:
        raise LabkitError(f"model.flavor must be one of {', '.join(LLAMA3)} for {name} (got {flavor!r})")
    if flavor in LABKIT_NAME:
        return replace(model_shape(LABKIT_NAME[flavor]), seq=seq)
    dim, layers, heads, kv, mult, multiple, vocab = LLAMA3[flavor]
    return ModelShape(f"llama3-{flavor.lower()}", layers, dim, heads, vocab, seq, ffn=llama_ffn(dim, mult, multiple),
                      kv_heads=kv or 0, gated=True, norm="rmsnorm", bias=False, tied=False, learned_pos=False,
                      dropout=False, source=f"{SOURCE}, flavor {flavor}")


def _key(shape: ModelShape) -> tuple:
    return (shape.layers, shape.hidden, shape.heads, shape.kv_heads or shape.heads, shape.ffn_size, shape.vocab,
            shape.gated, shape.norm, shape.bias, shape.tied)


def torchtitan_flavor(shape: ModelShape) -> tuple[str, str]:
    """The torchtitan (name, flavor) whose shape is ``shape``, else a LabkitError naming the flavors."""
    for flavor in LLAMA3:
        if _key(torchtitan_shape("llama3", flavor, shape.seq)) == _key(shape):
            return "llama3", flavor
    raise LabkitError(f"model must be one of torchtitan's llama3 flavors ({', '.join(LLAMA3)}) to be written as a "
                      f"torchtitan job: torchtitan builds its model from [model] name and flavor (got {shape.name})")
