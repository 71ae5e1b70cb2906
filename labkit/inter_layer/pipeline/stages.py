"""The pipeline's model: the tiny GPT with its head untied, cut into stages of consecutive blocks."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

from labkit.errors import require_divides, require_positive
from labkit.rig.data import vocab_size
from labkit.rig.model import GPTConfig, TinyGPT, config_from
from labkit.sim import schedule

DEFAULT_MODEL: dict[str, Any] = {"seq_len": 32, "n_layer": 4, "n_head": 2, "d_model": 32, "dropout": 0.0}


LR = 3e-3


def model_config(model: dict[str, Any] | None = None) -> GPTConfig:
    """The GPT of a pipeline run: ``DEFAULT_MODEL`` updated by ``model``; dropout must stay 0."""
    return config_from({"vocab_size": vocab_size(), **DEFAULT_MODEL}, model,
                       no_dropout="a pipeline run must match one process")


def check_pipeline(kind: str, p: int, m: int, v: int, cfg: GPTConfig, batch_size: int, steps: int = 1) -> None:
    """Refuse what torch's schedules refuse (see ``labkit.sim.schedule``), and splits that do not fit."""
    schedule(kind, p, m, v)
    require_positive("steps", steps)
    require_positive("batch_size", batch_size)
    require_divides("p*v (number of stages)", p * v, "n_layer", cfg.n_layer)
    require_divides("m (micro-batches)", m, "batch_size", batch_size)


def build_model(cfg: GPTConfig, seed: int = 0) -> TinyGPT:
    """The seeded TinyGPT with its head untied: ``lm_head`` gets its own copy of the embedding weight."""
    torch.manual_seed(seed)
    gpt = TinyGPT(cfg)
    gpt.lm_head.weight = nn.Parameter(gpt.wte.weight.detach().clone())
    return gpt


class StageModule(nn.Module):
    """Consecutive blocks of the GPT, with the embedding if first and ln_f + head if last."""

    def __init__(self, gpt: TinyGPT, blocks: range, first: bool, last: bool) -> None:
        super().__init__()
        self.embed = nn.ModuleDict({"wte": gpt.wte, "wpe": gpt.wpe, "drop": gpt.drop}) if first else None
        self.h = nn.ModuleList(gpt.h[i] for i in blocks)
        self.head = nn.ModuleDict({"ln_f": gpt.ln_f, "lm_head": gpt.lm_head}) if last else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.embed is not None:  # x: token ids (b, s)
            pos = torch.arange(x.size(1), device=x.device)
            x = self.embed["drop"](self.embed["wte"](x) + self.embed["wpe"](pos))  # (b, s, h)
        for block in self.h:
            x = block(x)
        if self.head is not None:
            x = self.head["lm_head"](self.head["ln_f"](x))  # (b, s, vocab)
        return x


def split_stages(gpt: TinyGPT, n_stages: int) -> list[StageModule]:
    """``n_stages`` stage modules of n_layer / n_stages blocks each, sharing the GPT's parameters."""
    per = len(gpt.h) // n_stages
    return [StageModule(gpt, range(s * per, (s + 1) * per), s == 0, s == n_stages - 1) for s in range(n_stages)]


def lm_loss(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy, as ``TinyGPT.forward`` computes it."""
    return F.cross_entropy(logits.float().view(-1, logits.size(-1)), target.view(-1))
