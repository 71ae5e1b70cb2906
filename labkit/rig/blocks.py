"""Which modules of a model are its repeated layers: the largest ``nn.ModuleList`` of identical blocks.

A per-layer table needs to know where the layers are. The lab's TinyGPT keeps them in ``h``;
transformers' GPT-2 in ``transformer.h``, Llama, Mistral and Qwen2 in ``model.layers``. Rather
than a table of names, the blocks are found by structure: among every ``nn.ModuleList`` whose
children are all of one class with the same parameter shapes, the one holding the most
parameters. A user can name another list (``blocks="encoder.layer"``).
"""

from __future__ import annotations

import torch.nn as nn

from labkit.errors import LabkitError, require_choice


def _signature(m: nn.Module) -> tuple:
    return type(m), tuple((n, tuple(p.shape)) for n, p in m.named_parameters())


def block_lists(model: nn.Module) -> dict[str, int]:
    """Every ``nn.ModuleList`` of two or more identical blocks: {qualified name: parameters it holds}."""
    out = {}
    for name, m in model.named_modules():
        if isinstance(m, nn.ModuleList) and len(m) >= 2 and name:
            if len({_signature(c) for c in m}) == 1:
                out[name] = sum(p.numel() for p in m.parameters())
    return out


def find_blocks(model: nn.Module, name: str | None = None) -> str:
    """Qualified name of the model's repeated layers: ``name`` checked, or the largest list of identical blocks.

    A model with a single layer has no list of two; its one-element ``nn.ModuleList`` is used then.
    """
    if name is not None:
        lists = [n for n, m in model.named_modules() if isinstance(m, nn.ModuleList) and n]
        return require_choice("blocks", name, lists)
    found = block_lists(model)
    if not found:
        singles = {n: sum(p.numel() for p in m.parameters()) for n, m in model.named_modules()
                   if isinstance(m, nn.ModuleList) and len(m) == 1 and n}
        if not singles:
            raise LabkitError(f"blocks: {type(model).__name__} has no nn.ModuleList of layers: name one with blocks=")
        found = singles
    return max(found, key=lambda n: (found[n], -n.count(".")))


def layer_of(module: str, prefix: str) -> tuple[int | None, str]:
    """(layer index, path inside the layer) of a qualified module name under ``prefix``; (None, name) outside."""
    if prefix and module.startswith(prefix + "."):
        head, _, rest = module[len(prefix) + 1:].partition(".")
        if head.isdigit():
            return int(head), rest
    return None, module
