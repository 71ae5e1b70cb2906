"""``labkit measure --full``: the whole model's step under fake tensors (``labkit.measure.fake_full``), and
``--snapshot FILE``: the same step in memory_viz's snapshot format (``labkit.measure.snapshot``)."""

from __future__ import annotations

import argparse
import json

from labkit.cli.common import parse_int
from labkit.errors import LabkitError

NOT_WITH_FULL = {"device": "a fake step runs on the CPU's kernels (its CUDA-only terms are added analytically)",
                 "calibration": "a fake step takes no time to compare"}


def run_full(a: argparse.Namespace, batch: int, seq: int, layers: int | None, dropout: float | None) -> int:
    """Measure the full-size step, print it (``--json``), and write ``--snapshot`` when asked."""
    from labkit.measure.fake_full import measure_full
    from labkit.predict.attention import torch_name

    if a.hf_config is None:
        raise LabkitError("full needs --hf-config: the fake path builds a transformers model from its config")
    for flag, why in NOT_WITH_FULL.items():
        if getattr(a, flag) is not None:
            raise LabkitError(f"{flag} does not apply with --full: {why}")
    if a.gradient_checkpointing and a.finetune is None:
        raise LabkitError("gradient_checkpointing applies with --finetune (full training's recompute is not in the "
                          "predicted peak)")
    ft = None
    if a.finetune is not None:
        from labkit.cli.finetune_args import finetune_from_args
        from labkit.measure.fake_build import load

        ft = finetune_from_args(a, load(a.hf_config, layers).shape, a.precision)
    report = measure_full(a.hf_config, batch, seq, a.precision, torch_name(a.attention), a.cache, dropout, layers, ft)
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


__all__ = ["parse_dropout", "parse_int", "run_full"]
