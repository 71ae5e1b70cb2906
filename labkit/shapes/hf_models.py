"""transformers models built from an ``HFModel`` (random weights, nothing downloaded), ready to measure.

``build_model`` makes the model a config file describes, with the implementation choices the
activation estimate names (attention kernel, cache on or off, dropout); on the ``meta`` device
it only counts parameters, in no memory. transformers is an optional extra (``pip install
labkit[hf]``): a missing install is reported as bad input, not a traceback.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from labkit.errors import LabkitError
from labkit.shapes.hf_config import HFModel

ARCHITECTURES = {"gpt2": "GPT2LMHeadModel", "llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM",
                 "qwen2": "Qwen2ForCausalLM"}
CONFIGS = {"gpt2": "GPT2Config", "llama": "LlamaConfig", "mistral": "MistralConfig", "qwen2": "Qwen2Config"}


def _transformers():
    try:
        import transformers
    except ImportError:
        raise LabkitError("hf_config needs transformers: pip install -e '.[hf]'") from None
    transformers.logging.set_verbosity_error()
    return transformers


def hf_config_object(spec: HFModel, attention: str = "eager", dropout: float | None = None, **overrides):
    """The transformers config of ``spec`` with the chosen attention kernel (and dropout, if given)."""
    tf = _transformers()
    fields = dict(spec.config) | overrides
    if dropout is not None:
        keys = ("resid_pdrop", "embd_pdrop", "attn_pdrop") if spec.family == "gpt2" else ("attention_dropout",)
        fields |= dict.fromkeys(keys, dropout)
    vocab = fields.get("vocab_size", spec.shape.vocab)
    for key in ("bos_token_id", "eos_token_id", "pad_token_id"):  # small test vocabularies
        if isinstance(fields.get(key), int) and fields[key] >= vocab:
            fields[key] = 0
    cfg = getattr(tf, CONFIGS[spec.family])(**fields)
    cfg._attn_implementation = attention
    return cfg


def build_model(spec: HFModel, attention: str = "eager", device: str | torch.device = "cpu", seed: int = 0,
                dropout: float | None = None, **overrides) -> nn.Module:
    """A randomly initialised transformers model of ``spec`` (``device="meta"``: shapes only, no memory)."""
    tf = _transformers()
    cfg = hf_config_object(spec, attention, dropout, **overrides)
    torch.manual_seed(seed)
    with torch.device(device):
        return getattr(tf, ARCHITECTURES[spec.family])(cfg)


def count_parameters(model: nn.Module) -> int:
    """Distinct parameters (tied weights once), counted from shapes: works on the meta device."""
    return sum({id(p): p.numel() for p in model.parameters()}.values())


def small_spec(family: str = "llama", layers: int = 2, hidden: int = 64, heads: int = 4, kv_heads: int = 2,
               ffn: int = 128, vocab: int = 96, positions: int = 64, **fields) -> HFModel:
    """A micro model of a family (the tests' and the notebook's): the same code paths, seconds on a CPU."""
    from labkit.shapes.hf_config import from_config

    if family == "gpt2":
        cfg = dict(model_type="gpt2", n_layer=layers, n_embd=hidden, n_head=heads, n_positions=positions,
                   vocab_size=vocab, n_inner=ffn)
    else:
        cfg = dict(model_type=family, num_hidden_layers=layers, hidden_size=hidden, num_attention_heads=heads,
                   num_key_value_heads=kv_heads, intermediate_size=ffn, vocab_size=vocab,
                   max_position_embeddings=positions, tie_word_embeddings=False)
    return from_config(cfg | fields, name=f"small-{family}")
