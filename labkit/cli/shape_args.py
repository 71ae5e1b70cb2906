"""The model-shape flags every subcommand shares: a preset, a parameter count, or a custom shape."""

from __future__ import annotations

import argparse

from labkit.cli.common import parse_int
from labkit.errors import LabkitError
from labkit.shapes import ModelShape, model_shape

SHAPE_FLAGS = ("layers", "hidden", "heads", "seq", "vocab")


def add_shape_flags(p: argparse.ArgumentParser) -> None:
    """``--model``, ``--params`` and the custom shape flags, as ``estimate`` and ``advise`` take them."""
    p.add_argument("--model", help="a preset (e.g. gpt3-175b, llama2-7b)")
    p.add_argument("--hf-config", help="a transformers config.json (GPT-2, Llama, Mistral, Qwen2 families) "
                   "or a shipped name (datasets/hf_configs), read offline")
    p.add_argument("--params", help="a parameter count alone: model states only")
    for flag in ("layers", "hidden", "heads", "vocab", "ffn"):
        p.add_argument(f"--{flag}", help="custom shape (ffn optional, default 4*hidden)")
    p.add_argument("--seq", help="sequence length (overrides a preset's context length)")
    p.add_argument("--gated", action="store_true", help="custom shape: a gated (SwiGLU) MLP, three matrices")
    p.add_argument("--untied", action="store_true", help="custom shape: output layer not tied to the embedding")
    p.add_argument("--norm", help="custom shape: rms (RMSNorm, no biases, rotary positions: Llama-style) or layer "
                   "(LayerNorm, the default)")


def shape_from_args(a: argparse.Namespace) -> ModelShape | None:
    """The preset, the custom shape, or None for ``--params`` (exactly one must be given)."""
    custom = {f: getattr(a, f) for f in ("layers", "hidden", "heads", "vocab", "ffn") if getattr(a, f)}
    hf = getattr(a, "hf_config", None)
    style = _style_flags(a)
    if style and not custom:
        raise LabkitError(f"{style[0]} is a custom-shape flag: give it with --layers --hidden --heads --vocab --seq, "
                          f"not with --model, --hf-config or --params")
    if hf is not None:
        if a.params is not None or a.model or custom:
            raise LabkitError("hf_config must be given alone: not with --model, --params or the shape flags")
        return _from_config(hf, a)
    if a.params is not None:
        if a.model or custom:
            raise LabkitError("params must be given alone: not with --model or the shape flags")
        return None
    if a.model:
        if custom:
            raise LabkitError("model must be given alone: not with the shape flags " + ", ".join(custom))
        from labkit.shapes import load_models
        from labkit.shapes.hf_config import shipped_configs

        if str(a.model).lower() not in load_models() and str(a.model).lower() in shipped_configs():
            return _from_config(str(a.model).lower(), a)  # --model and --hf-config accept the same shipped names
        return model_shape(a.model)
    if not custom:
        raise LabkitError("model must be given: --model NAME, --hf-config FILE, --params N, or --"
                          + " --".join(SHAPE_FLAGS))
    given = {**custom, "seq": a.seq}
    missing = [f"--{f}" for f in SHAPE_FLAGS if given.get(f) is None]
    if missing:
        flags = ", ".join("--" + f for f in SHAPE_FLAGS)
        raise LabkitError(f"shape needs {flags} together (missing {', '.join(missing)})")
    sizes = {f: parse_int(f, given[f]) for f in SHAPE_FLAGS}
    norm = {None: "layernorm", "layer": "layernorm", "rms": "rmsnorm"}.get(getattr(a, "norm", None))
    if norm is None:
        raise LabkitError(f"norm must be one of rms, layer (got {a.norm!r})")
    llama = norm == "rmsnorm"  # RMSNorm families (Llama, Mistral, Qwen2) have no biases and rotary positions
    return ModelShape(name="custom", **sizes, ffn=parse_int("ffn", a.ffn, positive=False) if a.ffn else 0,
                      gated=bool(getattr(a, "gated", False)), tied=not getattr(a, "untied", False), norm=norm,
                      bias=not llama, learned_pos=not llama)


LONGEST_DEFAULT_SEQ = 8192


def _from_config(name: str, a: argparse.Namespace) -> ModelShape:
    """A config file's shape; ``--seq`` must be given when its positions exceed ``LONGEST_DEFAULT_SEQ``: a
    model that allows 131,072 positions is not trained at all of them by default."""
    from labkit.shapes.hf_config import shape_from_hf_config

    shape = shape_from_hf_config(name)
    if getattr(a, "seq", None) is None and shape.seq > LONGEST_DEFAULT_SEQ:
        raise LabkitError(f"seq must be given for {shape.name}: its config allows {shape.seq:,} positions, more than "
                          f"{LONGEST_DEFAULT_SEQ:,}; pass --seq N, the length you train at (got none)")
    return shape


def _style_flags(a: argparse.Namespace) -> list[str]:
    """The custom-shape style flags given (``--gated``, ``--untied``, ``--norm``)."""
    return [f"--{f}" for f in ("gated", "untied", "norm") if getattr(a, f, None) not in (None, False)]
