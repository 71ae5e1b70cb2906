"""The tiny GPT the lab trains, written so that what autograd saves is easy to name.

Shaped after nanoGPT's ``model.py`` (pre-norm GPT-2 blocks, tied embeddings), with
one difference that matters here: every operation that keeps a tensor for the
backward pass is its own named submodule (``qk``, ``softmax``, ``attn_drop``, ``av``,
``act``, ...). ``labkit.measure`` attributes each saved tensor to the module that
saved it, so a learner can read off, tensor by tensor, where Korthikanti et al.'s
34 s*b*h + 5 a*s^2*b bytes per layer come from.

Two attention paths:

* ``explicit`` materialises the a*s*s score matrix, softmax and dropout, as the
  paper's accounting assumes;
* ``fused`` calls ``scaled_dot_product_attention`` (a flash kernel on the CPU),
  which keeps only q, k, v, the output and a log-sum-exp per row. Fused kernels do
  not drop attention probabilities here, so this path has no attention dropout.

Two dropout masks:

* ``bool`` uses ``torch.native_dropout``, which keeps a 1-byte mask like the fused
  GPU kernels the paper measured;
* ``float`` uses ``F.dropout``, which on the CPU keeps a full-width mask
  (4 bytes per element in fp32): the same model, more memory.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from labkit.errors import LabkitError, require_choice, require_divides, require_positive

ATTENTION_KINDS = ("explicit", "fused")
MASK_KINDS = ("bool", "float")


@dataclass(frozen=True)
class GPTConfig:
    """Shape and behaviour of the tiny GPT; validated on construction."""

    vocab_size: int = 64
    seq_len: int = 64
    n_layer: int = 2
    n_head: int = 4
    d_model: int = 64
    ffn: int = 0  # 0 means 4 * d_model, as in GPT-2
    dropout: float = 0.1
    attention: str = "explicit"
    mask: str = "bool"

    def __post_init__(self) -> None:
        for name in ("vocab_size", "seq_len", "n_layer", "n_head", "d_model"):
            require_positive(name, getattr(self, name))
        require_divides("n_head", self.n_head, "d_model", self.d_model)
        if isinstance(self.ffn, bool) or not isinstance(self.ffn, int) or self.ffn < 0:
            raise LabkitError(f"ffn must be a positive integer, or 0 for 4*d_model (got {self.ffn!r})")
        if not 0.0 <= self.dropout < 1.0:
            raise LabkitError(f"dropout must be in [0, 1) (got {self.dropout!r})")
        require_choice("attention", self.attention, ATTENTION_KINDS)
        require_choice("mask", self.mask, MASK_KINDS)

    @property
    def ffn_size(self) -> int:
        return self.ffn or 4 * self.d_model

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_head


class Dropout(nn.Module):
    """Dropout whose saved mask is 1 byte (``bool``) or full width (``float``)."""

    def __init__(self, p: float, mask: str) -> None:
        super().__init__()
        self.p, self.mask = p, mask

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0.0:
            return x
        if self.mask == "bool":
            return torch.native_dropout(x, self.p, True)[0]
        return F.dropout(x, self.p, True)


class MatMul(nn.Module):
    """``a @ b`` as a module, so the two inputs it saves are attributed to it."""

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a @ b


class ExplicitAttention(nn.Module):
    """softmax(q k^T / sqrt(d)) v with the a*s*s scores in memory (Vaswani et al. 2017)."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.qk, self.av = MatMul(), MatMul()
        self.softmax = nn.Softmax(dim=-1)
        self.attn_drop = Dropout(cfg.dropout, cfg.mask)
        causal = torch.ones(cfg.seq_len, cfg.seq_len, dtype=torch.bool).triu(1)
        self.register_buffer("future", causal, persistent=False)

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        s = q.size(-2)
        scores = self.qk(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(q.size(-1)))  # (b, a, s, s)
        scores = scores.masked_fill(self.future[:s, :s], float("-inf"))
        return self.av(self.attn_drop(self.softmax(scores)), v)  # (b, a, s, d)


class FusedAttention(nn.Module):
    """The same attention through ``scaled_dot_product_attention`` (Dao et al. 2022)."""

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)


class SelfAttention(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.n_head = cfg.n_head
        self.c_attn = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.core = ExplicitAttention(cfg) if cfg.attention == "explicit" else FusedAttention()
        self.c_proj = nn.Linear(cfg.d_model, cfg.d_model)
        self.resid_drop = Dropout(cfg.dropout, cfg.mask)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, h = x.shape
        q, k, v = self.c_attn(x).split(h, dim=2)  # 3 x (b, s, h)
        q, k, v = (t.view(b, s, self.n_head, h // self.n_head).transpose(1, 2) for t in (q, k, v))
        y = self.core(q, k, v).transpose(1, 2).contiguous().view(b, s, h)
        return self.resid_drop(self.c_proj(y))


class MLP(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.c_fc = nn.Linear(cfg.d_model, cfg.ffn_size)
        self.act = nn.GELU()
        self.c_proj = nn.Linear(cfg.ffn_size, cfg.d_model)
        self.drop = Dropout(cfg.dropout, cfg.mask)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop(self.c_proj(self.act(self.c_fc(x))))


class Block(nn.Module):
    """Pre-norm transformer layer: x + attn(ln(x)), then x + mlp(ln(x))."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.d_model)
        self.attn = SelfAttention(cfg)
        self.ln_2 = nn.LayerNorm(cfg.d_model)
        self.mlp = MLP(cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class TinyGPT(nn.Module):
    """GPT-2 style decoder; ``lm_head`` shares its weight with the token embedding."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.wte = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.wpe = nn.Embedding(cfg.seq_len, cfg.d_model)
        self.drop = Dropout(cfg.dropout, cfg.mask)
        self.h = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.d_model)
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight
        self.apply(self._init)

    @staticmethod
    def _init(m: nn.Module) -> None:
        """N(0, 0.02) weights (GPT-2's init), drawn in float64 and rounded: torch's float32 ``normal_`` takes a
        vectorised path on AVX2 CPUs and a scalar one elsewhere, whose last bits differ, so a float32 draw
        would start every CPU from other weights; the float64 draw is the same everywhere."""
        if isinstance(m, (nn.Linear, nn.Embedding)):
            with torch.no_grad():
                m.weight.copy_(torch.empty(m.weight.shape, dtype=torch.float64).normal_(mean=0.0, std=0.02))
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None):
        """Logits (b, s, vocab); with ``targets``, also the mean cross-entropy loss."""
        b, s = idx.shape
        if s > self.cfg.seq_len:
            raise LabkitError(f"sequence length must be at most seq_len={self.cfg.seq_len} (got {s})")
        pos = torch.arange(s, device=idx.device)
        x = self.drop(self.wte(idx) + self.wpe(pos))
        for block in self.h:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        if targets is None:
            return logits
        wide = logits if logits.dtype == torch.float64 else logits.float()  # 16-bit logits: the loss in fp32
        loss = F.cross_entropy(wide.view(-1, logits.size(-1)), targets.view(-1))
        return logits, loss


def count_parameters(model: nn.Module) -> int:
    """Number of distinct parameters (tied weights counted once)."""
    seen: dict[int, int] = {}
    for p in model.parameters():
        seen[id(p)] = p.numel()
    return sum(seen.values())


def config_from(defaults: dict, overrides: dict | None = None, *, no_dropout: str = "") -> GPTConfig:
    """A ``GPTConfig`` from a topic's defaults updated by a learner's dict, checked field by field.

    An unknown field names the allowed ones. With ``no_dropout`` (the reason, e.g. "ranks must agree"),
    a dropout other than 0 is refused: distributed runs compare against one process bit for bit.
    """
    spec = {**defaults, **(overrides or {})}
    allowed = list(GPTConfig.__dataclass_fields__)
    unknown = sorted(set(spec) - set(allowed))
    if unknown:
        raise LabkitError(f"model has unknown field(s) {', '.join(unknown)}: allowed {', '.join(allowed)}")
    cfg = GPTConfig(**spec)
    if no_dropout and cfg.dropout != 0.0:
        raise LabkitError(f"model dropout must be 0.0: {no_dropout} (got {cfg.dropout})")
    return cfg
