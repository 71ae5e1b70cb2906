"""The lab's corpus, tokenizer and batches: generated here, identical on every machine.

Nothing is downloaded. The corpus is produced by a small seeded grammar about the
lab's own subject (devices, tiers, tensors, bytes), so it has enough structure for
the loss of a tiny character-level GPT to fall visibly within a few hundred steps.

Batches are a pure function of the step index (``batch(step)``): a resumed run, a
second process or a second kernel reads exactly the same data at the same step.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from functools import lru_cache

import torch

from labkit.errors import LabkitError, require_choice, require_positive

_SUBJECTS = ["the gpu", "the cpu", "each rank", "the optimizer", "the pipeline", "the trainer"]
_VERBS = ["stores", "moves", "reads", "writes", "shards", "keeps", "frees", "copies"]
_OBJECTS = ["weights", "gradients", "activations", "optimizer states", "checkpoints", "masks"]
_TIERS = ["hbm", "dram", "the ssd", "the disk", "nvlink", "pcie"]
_UNITS = ["bytes", "kb", "mb", "gb"]


def _sentence(rng: random.Random) -> str:
    n = rng.choice([2, 4, 8, 16, 32, 64, 128])
    kind = rng.randrange(4)
    subj, verb, obj, tier = (rng.choice(w) for w in (_SUBJECTS, _VERBS, _OBJECTS, _TIERS))
    if kind == 0:
        return f"{subj} {verb} {n} {rng.choice(_UNITS)} of {obj} to {tier}."
    if kind == 1:
        return f"{subj} {verb} the {obj} in {tier}, then {rng.choice(_VERBS)} them again."
    if kind == 2:
        return f"when {tier} is full, {subj} {verb} {obj} to {rng.choice(_TIERS)}."
    return f"{n} layers of {obj} fit in {tier}; {2 * n} do not."


@lru_cache(maxsize=4)
def corpus(n_sentences: int = 20_000, seed: int = 1234) -> str:
    """The generated text: ``n_sentences`` lines from the grammar, seeded."""
    require_positive("n_sentences", n_sentences)
    rng = random.Random(seed)
    return "\n".join(_sentence(rng) for _ in range(n_sentences)) + "\n"


@dataclass(frozen=True)
class CharTokenizer:
    """Characters to ids and back; the vocabulary is the sorted set of corpus characters."""

    chars: str

    @classmethod
    def from_text(cls, text: str) -> CharTokenizer:
        return cls("".join(sorted(set(text))))

    @property
    def vocab_size(self) -> int:
        return len(self.chars)

    def encode(self, text: str) -> list[int]:
        index = {c: i for i, c in enumerate(self.chars)}
        unknown = sorted(set(text) - index.keys())
        if unknown:
            shown = "".join(unknown)
            raise LabkitError(f"text has characters outside the vocabulary: {shown!r}")
        return [index[c] for c in text]

    def decode(self, ids: list[int]) -> str:
        return "".join(self.chars[i] for i in ids)


@dataclass(frozen=True)
class Batches:
    """Deterministic (input, target) batches: ``batches(step)`` always returns the same pair."""

    tokens: torch.Tensor
    batch_size: int
    seq_len: int
    seed: int = 0

    def __call__(self, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + step)
        starts = torch.randint(0, len(self.tokens) - self.seq_len - 1, (self.batch_size,), generator=g)
        rows = torch.stack([self.tokens[i : i + self.seq_len + 1] for i in starts.tolist()])
        return rows[:, :-1].contiguous(), rows[:, 1:].contiguous()


@lru_cache(maxsize=2)
def dataset(split: str = "train") -> tuple[torch.Tensor, CharTokenizer]:
    """Token ids of the train (first 90%) or validation (last 10%) part of the corpus."""
    require_choice("split", split, ("train", "val"))
    text = corpus()
    tok = CharTokenizer.from_text(text)
    ids = torch.tensor(tok.encode(text), dtype=torch.long)
    cut = int(0.9 * len(ids))
    return (ids[:cut] if split == "train" else ids[cut:]), tok


def batches(batch_size: int, seq_len: int, seed: int = 0, split: str = "train") -> Batches:
    """The step-indexed batch source the training loop and every topic use."""
    require_positive("batch_size", batch_size)
    require_positive("seq_len", seq_len)
    tokens, _ = dataset(split)
    return Batches(tokens, batch_size, seq_len, seed)


def vocab_size() -> int:
    """Size of the corpus vocabulary (what ``GPTConfig.vocab_size`` should be)."""
    return dataset()[1].vocab_size
