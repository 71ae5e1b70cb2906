"""Shapes of real models (no weights): what the analytic model needs to estimate them.

The presets live in ``datasets/models.toml``, each with its source; a user adds a
model by copying a block there. ``hf_config`` reads a transformers ``config.json`` offline into a
shape, and ``hf_models`` builds the transformers model from it (random weights, nothing downloaded).
``ModelShape.from_config`` gives the shape of the
lab's own TinyGPT, so the estimator and the measured micro-run use one description.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, fields
from functools import lru_cache
from pathlib import Path

from labkit.errors import LabkitError, require_choice, require_divides, require_positive

MODELS_FILE = Path(__file__).resolve().parents[2] / "datasets" / "models.toml"
NORMS = ("layernorm", "rmsnorm")


@dataclass(frozen=True)
class ModelShape:
    """A decoder-only transformer, described by the sizes that set its memory."""

    name: str
    layers: int
    hidden: int
    heads: int
    vocab: int
    seq: int
    ffn: int = 0  # 0 means 4 * hidden
    kv_heads: int = 0  # 0 means heads (no grouped-query attention)
    gated: bool = False  # SwiGLU MLP: three matrices instead of two
    norm: str = "layernorm"
    bias: bool = True
    qkv_bias: bool = False  # biases on Q, K, V only (Qwen2), when ``bias`` is False
    tied: bool = True
    learned_pos: bool = True
    dropout: bool = True
    source: str = ""
    activation: str = ""  # transformers' name (hidden_act, activation_function); "": silu if gated, else gelu_new
    dtype: str = "float32"  # the parameters' dtype as transformers builds the model (the config's torch_dtype)

    def __post_init__(self) -> None:
        for name in ("layers", "hidden", "heads", "vocab", "seq"):
            require_positive(name, getattr(self, name))
        require_divides("heads", self.heads, "hidden", self.hidden)
        for name in ("ffn", "kv_heads"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise LabkitError(f"{name} must be a positive integer or 0 for the default (got {value!r})")
        if self.kv_heads:
            require_divides("kv_heads", self.kv_heads, "heads", self.heads)
        require_choice("norm", self.norm, NORMS)

    @property
    def ffn_size(self) -> int:
        return self.ffn or 4 * self.hidden

    @property
    def kv_hidden(self) -> int:
        """Width of K (and of V): kv_heads * head_dim."""
        return (self.kv_heads or self.heads) * (self.hidden // self.heads)

    @property
    def params_per_layer(self) -> int:
        h, f, kv = self.hidden, self.ffn_size, self.kv_hidden
        norms = 2 * (2 * h if self.norm == "layernorm" else h)
        attn = h * (h + 2 * kv) + h * h + (h + 2 * kv + h if self.bias else h + 2 * kv if self.qkv_bias else 0)
        mlp = (3 if self.gated else 2) * h * f + ((f + h) if self.bias else 0)
        return norms + attn + mlp

    @property
    def params(self) -> int:
        """Parameter count Psi: layers, embeddings, final norm, output layer if untied."""
        h = self.hidden
        embed = self.vocab * h + (self.seq * h if self.learned_pos else 0)
        final_norm = 2 * h if self.norm == "layernorm" else h
        head = 0 if self.tied else self.vocab * h
        return self.layers * self.params_per_layer + embed + final_norm + head

    @classmethod
    def from_config(cls, cfg, name: str = "tiny-gpt") -> ModelShape:
        """The shape of a ``labkit.rig.model.GPTConfig`` (duck-typed to keep this module torch-free)."""
        return cls(
            name=name, layers=cfg.n_layer, hidden=cfg.d_model, heads=cfg.n_head,
            vocab=cfg.vocab_size, seq=cfg.seq_len, ffn=cfg.ffn, dropout=cfg.dropout > 0,
        )


@lru_cache(maxsize=4)
def load_models(path: str | None = None) -> dict[str, ModelShape]:
    """All presets, keyed by lower-case name and alias."""
    raw = tomllib.loads(Path(path or MODELS_FILE).read_text())
    known = {f.name for f in fields(ModelShape)}
    out: dict[str, ModelShape] = {}
    for entry in raw.get("model", []):
        aliases = entry.get("aliases", [])
        shape = ModelShape(**{k: v for k, v in entry.items() if k in known})
        for key in [shape.name, *aliases]:
            out[key.lower()] = shape
    return out


def model_names() -> list[str]:
    return sorted({m.name for m in load_models().values()}, key=lambda n: load_models()[n].params)


def model_shape(name: str) -> ModelShape:
    """A preset by name or alias (case-insensitive); an unknown name lists the allowed ones."""
    models = load_models()
    key = str(name).lower()
    if key not in models:
        require_choice("model", name, model_names())
    return models[key]
