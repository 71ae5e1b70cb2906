"""A transformers-style ``config.json`` read offline into a ``ModelShape`` and the implementation it implies.

Four families, the decoder-only models most people fine-tune first:

* ``gpt2``: learned positions, LayerNorm, biases everywhere, a GeLU MLP (``activation_function``,
  ``gelu_new`` by default), dropout (``resid_pdrop``, ``embd_pdrop``, ``attn_pdrop``), tied embeddings;
* ``llama``, ``mistral``, ``qwen2``: rotary positions, RMSNorm, a SwiGLU MLP (three matrices),
  grouped-query attention (``num_key_value_heads``), no biases except Q, K, V in Qwen2, tied or
  untied embeddings (``tie_word_embeddings``).

The shape sets the parameter count (equal to transformers' own, tested on the files of
``datasets/hf_configs/``); the traits (activation, norm, dropout, softmax dtype) set what the
activation estimate of ``labkit.predict.activation_options`` assumes. Torch-free.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from labkit.errors import LabkitError, require_limit
from labkit.shapes import ModelShape

FAMILIES = ("gpt2", "llama", "mistral", "qwen2")
CONFIG_DIR = Path(__file__).resolve().parents[2] / "datasets" / "hf_configs"
ACTIVATIONS = {"gelu": "gelu", "gelu_new": "gelu_new", "gelu_pytorch_tanh": "gelu", "gelu_fast": "gelu_new",
               "silu": "silu", "swish": "silu"}  # transformers' name -> what autograd keeps (see activation_options)


@dataclass(frozen=True)
class HFModel:
    """A config file's model: its shape and the implementation traits the activation estimate needs."""

    family: str
    shape: ModelShape
    activation: str  # transformers' name, e.g. "gelu_new", "silu"
    embd_dropout: float
    resid_dropout: float
    attn_dropout: float
    use_cache: bool
    config: dict  # the file's fields (keys starting with "_" removed): what transformers is built from
    source: str = ""

    @property
    def head_dim(self) -> int:
        return self.shape.hidden // self.shape.heads

    @property
    def rotary(self) -> bool:
        return self.family != "gpt2"


def _field(cfg: dict, name: str, family: str, kind: type = int, default: Any = ...) -> Any:
    if name not in cfg or cfg[name] is None:
        if default is ...:
            raise LabkitError(f"config field {name} is missing (needed for a {family} model)")
        return default
    value = cfg[name]
    ok = isinstance(value, kind) and not isinstance(value, bool) if kind is not bool else isinstance(value, bool)
    if kind is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not ok or (kind is int and value <= 0):
        want = {int: "a positive integer", float: "a number", bool: "true or false", str: "a string"}[kind]
        raise LabkitError(f"config field {name} must be {want} (got {value!r})")
    if kind is float and not (0 <= value < 1 if "drop" in name else math.isfinite(value)):
        raise LabkitError(f"config field {name} must be " + ("a probability in [0, 1)" if "drop" in name else
                          "a finite number") + f" (got {value!r})")
    return require_limit(name, value) if kind is int else value


def read_config(path: str | Path) -> dict:
    """The JSON object of a config file; an unreadable or malformed file names itself."""
    p = Path(path)
    try:
        raw = json.loads(p.read_text(encoding="utf-8"))
    except OSError as err:
        raise LabkitError(f"hf_config {str(p)!r} cannot be read: {err.strerror}") from None
    except json.JSONDecodeError as err:
        raise LabkitError(f"hf_config {str(p)!r} is not valid JSON: {err}") from None
    if not isinstance(raw, dict):
        raise LabkitError(f"hf_config {str(p)!r} must hold a JSON object (got {type(raw).__name__})")
    return raw


def from_config(cfg: dict | str | Path, name: str = "") -> HFModel:
    """An ``HFModel`` from a config dict or file. ``model_type`` picks the family; a missing or bad
    field, or a family outside ``FAMILIES``, raises ``LabkitError`` naming it."""
    if not isinstance(cfg, dict):
        name = name or Path(cfg).stem
        cfg = read_config(cfg)
    source = str(cfg.get("_source", ""))
    cfg = {k: v for k, v in cfg.items() if not k.startswith("_")}
    family = cfg.get("model_type")
    if family not in FAMILIES:
        raise LabkitError(f"config field model_type must be one of {', '.join(FAMILIES)} (got {family!r}): "
                          "labkit reads the GPT-2, Llama, Mistral and Qwen2 families")
    name = name or family
    if family == "gpt2":
        hidden = _field(cfg, "n_embd", family)
        shape = ModelShape(name=name, layers=_field(cfg, "n_layer", family), hidden=hidden,
                           heads=_field(cfg, "n_head", family), vocab=_field(cfg, "vocab_size", family),
                           seq=_field(cfg, "n_positions", family), ffn=_field(cfg, "n_inner", family, default=0),
                           tied=True, learned_pos=True, source=source,
                           dropout=any(_field(cfg, k, family, float, 0.1) > 0
                                       for k in ("resid_pdrop", "embd_pdrop", "attn_pdrop")))
        act = _field(cfg, "activation_function", family, str, "gelu_new")
        drops = [float(_field(cfg, k, family, float, 0.1)) for k in ("embd_pdrop", "resid_pdrop", "attn_pdrop")]
    else:
        hidden, heads = _field(cfg, "hidden_size", family), _field(cfg, "num_attention_heads", family)
        head_dim = cfg.get("head_dim")
        if head_dim is not None and head_dim * heads != hidden:
            raise LabkitError(f"config field head_dim must be hidden_size/num_attention_heads = {hidden // heads} "
                              f"(got {head_dim!r}): other head sizes are not supported")
        shape = ModelShape(name=name, layers=_field(cfg, "num_hidden_layers", family), hidden=hidden, heads=heads,
                           vocab=_field(cfg, "vocab_size", family),
                           seq=_field(cfg, "max_position_embeddings", family),
                           ffn=_field(cfg, "intermediate_size", family),
                           kv_heads=_field(cfg, "num_key_value_heads", family, default=heads), gated=True,
                           norm="rmsnorm", bias=False, qkv_bias=family == "qwen2" or bool(cfg.get("attention_bias")),
                           tied=_field(cfg, "tie_word_embeddings", family, bool, family == "qwen2"),
                           learned_pos=False, source=source,
                           dropout=_field(cfg, "attention_dropout", family, float, 0.0) > 0)
        if cfg.get("mlp_bias"):
            raise LabkitError("config field mlp_bias must be false (got true): MLP biases are not supported")
        act = _field(cfg, "hidden_act", family, str, "silu")
        drops = [0.0, 0.0, float(_field(cfg, "attention_dropout", family, float, 0.0))]
    if act not in ACTIVATIONS:
        raise LabkitError(f"config field {'activation_function' if family == 'gpt2' else 'hidden_act'} must be one "
                          f"of {', '.join(ACTIVATIONS)} (got {act!r})")
    dtype = str(cfg.get("torch_dtype") or cfg.get("dtype") or "float32")  # transformers builds fp32 without one
    shape = replace(shape, activation=act, dtype=dtype)
    return HFModel(family, shape, act, *drops, use_cache=_field(cfg, "use_cache", family, bool, True),
                   config=cfg, source=source)


def shipped_configs() -> dict[str, Path]:
    """The config files shipped in ``datasets/hf_configs``, by name (file stem)."""
    return {p.stem: p for p in sorted(CONFIG_DIR.glob("*.json"))}


def resolve(path: str | Path) -> Path:
    """A shipped config by name (``llama-2-7b``) or a path to any ``config.json``."""
    return shipped_configs().get(str(path), Path(path))


def shape_from_hf_config(path: str | Path) -> ModelShape:
    """The ``ModelShape`` of a config file, or of a shipped one by name. Its ``seq`` is the model's
    position limit (``n_positions``, ``max_position_embeddings``): set a training length in the setup."""
    return from_config(resolve(path)).shape
