"""``labkit measure --full``: the whole model's step under fake tensors (``labkit.measure.fake_full``), and
``--snapshot FILE``: the same step in memory_viz's snapshot format (``labkit.measure.snapshot``)."""

from __future__ import annotations

import argparse
import json

from labkit.cli.common import parse_int
from labkit.errors import LabkitError

FULL_ONLY = {"snapshot": "the snapshot is of the fake step's recorded storages",
             "recompute": "the real-step path measures no recompute; labkit estimate --recompute predicts it",
             "loss_chunks": "the chunked loss is measured on the fake step only"}
NOT_WITH_FULL = {"device": "a fake step runs on the CPU's kernels (its CUDA-only terms are added analytically)",
                 "calibration": "a fake step takes no time to compare"}


def add_full_flags(p: argparse.ArgumentParser) -> None:
    """The flags only ``--full`` reads (each refused without it by ``refuse_without_full``)."""
    p.add_argument("--recompute", help="with --full: none (default) or full: transformers' gradient checkpointing "
                   "of every layer (with --finetune, the same as --gradient-checkpointing)")
    p.add_argument("--loss-chunks", help="with --full: the output layer and cross-entropy over N sequence chunks, "
                   "each recomputed in backward (as Liger's and torchtune's chunked losses); default: transformers' "
                   "loss over the whole fp32 logits")


def refuse_without_full(a: argparse.Namespace) -> None:
    """A ``--full`` flag given without ``--full``: one line naming the flag and what it needs."""
    for flag, why in FULL_ONLY.items():
        if getattr(a, flag, None) is not None:
            raise LabkitError(f"{flag} needs --full: {why}")


def _recompute(a: argparse.Namespace) -> str:
    from labkit.errors import require_choice
    from labkit.measure.fake_full import RECOMPUTE

    if a.recompute == "selective":
        raise LabkitError("recompute must be none or full with --full (got 'selective': a transformers model's sdpa "
                          "keeps no s^2 tensor for it to drop; labkit.predict.recompute_peak says more)")
    return require_choice("recompute", "none" if a.recompute is None else a.recompute, RECOMPUTE)


def run_full(a: argparse.Namespace, batch: int, seq: int, layers: int | None, dropout: float | None) -> int:
    """Measure the full-size step, print it (``--json``), and write ``--snapshot`` when asked."""
    from labkit.measure.fake_full import measure_full
    from labkit.predict.attention import torch_name

    if a.hf_config is None:
        raise LabkitError("full needs --hf-config: the fake path builds a transformers model from its config")
    for flag, why in NOT_WITH_FULL.items():
        if getattr(a, flag) is not None:
            raise LabkitError(f"{flag} does not apply with --full: {why}")
    recompute = _recompute(a)
    if a.gradient_checkpointing and a.finetune is None:
        raise LabkitError("gradient_checkpointing applies with --finetune; full training takes --recompute full")
    ft = None
    if a.finetune is not None:
        from labkit.cli.finetune_args import finetune_from_args
        from labkit.measure.fake_build import load

        ft = finetune_from_args(a, load(a.hf_config, layers).shape, a.precision)
    chunks = None if a.loss_chunks is None else parse_int("loss_chunks", a.loss_chunks)
    report = measure_full(a.hf_config, batch, seq, a.precision, torch_name(a.attention), a.cache, dropout, layers, ft,
                          recompute="none" if ft is not None else recompute, loss_chunks=chunks)
    if a.snapshot:
        from labkit.measure.snapshot import write_snapshot

        write_snapshot(report.recorded, a.snapshot)
    print(json.dumps(report.to_json(), indent=2) if a.json else str(report))
    return 0


def parse_dropout(text: str | None) -> float | None:
    """``--dropout`` as a probability in [0, 1), or None when not given."""
    if text is None:
        return None
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0.0 <= value < 1.0:
        raise LabkitError(f"dropout must be a number in [0, 1) (got {text!r})")
    return value


__all__ = ["add_full_flags", "parse_dropout", "parse_int", "refuse_without_full", "run_full"]
