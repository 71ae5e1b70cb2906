"""One name for the attention kernel, everywhere: ``fused`` or ``explicit``, with the other spellings accepted.

* ``fused``: the s x s scores never reach memory: FlashAttention (Dao et al., NeurIPS 2022), which
  ``torch.nn.functional.scaled_dot_product_attention`` ("sdpa") dispatches to on a GPU. The
  default, because every current training stack uses it (Megatron-Core, llm-foundry, torchtitan,
  transformers' default ``attn_implementation``).
* ``explicit``: Q K^T, softmax and dropout written out, the s x s scores held for backward
  (Megatron-LM 2021, transformers' ``attn_implementation="eager"``).

Commands, panels and the advisor accept ``eager``, ``sdpa`` and ``flash`` as well and print the
two names above; :func:`torch_name` gives the spelling transformers expects.
"""

from __future__ import annotations

from labkit.errors import LabkitError

KINDS = ("fused", "explicit")
DEFAULT = "fused"
SPELLINGS = {"fused": "fused", "flash": "fused", "sdpa": "fused", "explicit": "explicit", "eager": "explicit"}
TORCH_NAMES = {"fused": "sdpa", "explicit": "eager"}


def attention_kind(value: object, field: str = "attention") -> str:
    """The attention's one name (``fused`` or ``explicit``) for any accepted spelling, else a LabkitError."""
    if isinstance(value, str) and value.strip().lower() in SPELLINGS:
        return SPELLINGS[value.strip().lower()]
    raise LabkitError(f"{field} must be one of fused (also: flash, sdpa), explicit (also: eager) (got {value!r})")


def torch_name(value: object) -> str:
    """transformers' ``attn_implementation`` for an attention of any accepted spelling: ``sdpa`` or ``eager``."""
    return TORCH_NAMES[attention_kind(value)]
