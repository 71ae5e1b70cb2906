"""``labkit measure``: one real step of a model (a config.json, or the tiny GPT), measured beside predicted."""

from __future__ import annotations

import argparse
import json
import sys

from labkit.cli.calibrate import load_calibration
from labkit.cli.common import parse_int
from labkit.cli.finetune_args import add_finetune_flags, measure_finetune
from labkit.cli.measure_full import add_full_flags, refuse_without_full
from labkit.cli.measure_sharded import add_sharded_flags, run_sharded, wants_sharded
from labkit.errors import LabkitError
from labkit.predict.attention import torch_name

PRECISIONS = ("fp32", "bf16-autocast", "bf16-mixed")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("measure", help="one real training step of a model, measured beside predicted")
    p.add_argument("--hf-config", help="a transformers config.json (GPT-2, Llama, Mistral, Qwen2) or a shipped "
                   "name (datasets/hf_configs); default: the lab's tiny GPT")
    p.add_argument("--layers", help="keep the config's widths but build only this many layers")
    p.add_argument("--batch", default="2", help="micro-batch (default 2)")
    p.add_argument("--seq", default="32", help="sequence length (default 32)")
    p.add_argument("--precision", default="fp32", help=", ".join(PRECISIONS))
    p.add_argument("--attention", default="fused", help="fused (default: sdpa; also flash, sdpa), explicit "
                   "(also eager)")
    p.add_argument("--cache", action="store_true", help="use_cache=True while training (transformers' default)")
    p.add_argument("--dropout", help="dropout probability for every dropout (default: the config's)")
    p.add_argument("--device", help="cpu or cuda (default: cuda when present)")
    p.add_argument("--calibration", help="a labkit calibrate file: the step's time predicted on it too")
    p.add_argument("--json", action="store_true", help="print bytes as JSON")
    p.add_argument("--full", action="store_true", help="the whole model's step under fake tensors (no weight "
                   "allocated: a 70B step in about a minute), CUDA-only terms added analytically")
    p.add_argument("--snapshot", help="with --full: write the step as a memory_viz snapshot (a pickle of plain "
                   "dicts: python -m torch.cuda._memory_viz trace FILE, or pytorch.org/memory_viz)")
    add_finetune_flags(p, measuring=True)
    add_full_flags(p)
    add_sharded_flags(p)
    p.set_defaults(run=run)


def run(a: argparse.Namespace) -> int:
    from tqdm.auto import tqdm

    from labkit.measure.own_model import compare_model

    batch, seq = parse_int("batch", a.batch), parse_int("seq", a.seq)
    layers = parse_int("layers", a.layers) if a.layers is not None else None
    if wants_sharded(a):
        return run_sharded(a, batch, seq, layers)
    if a.full:
        from labkit.cli.measure_full import parse_dropout, run_full

        return run_full(a, batch, seq, layers, parse_dropout(a.dropout))
    refuse_without_full(a)
    if a.finetune is not None:
        report = measure_finetune(a, batch, seq, layers)
        print(json.dumps(report.to_json(), indent=2) if a.json else str(report))
        return 0
    dropout = None
    if a.dropout is not None:
        try:
            dropout = float(a.dropout)
        except ValueError:
            dropout = -1.0
        if not 0.0 <= dropout < 1.0:
            raise LabkitError(f"dropout must be a number in [0, 1) (got {a.dropout!r})")
    calibration = load_calibration(a.calibration)
    bar = tqdm(total=5, desc="labkit measure", file=sys.stderr, leave=False)

    def progress(what: str) -> None:
        bar.set_postfix_str(what)
        bar.update(0 if bar.n == 0 and what == "building the model" else 1)

    try:
        attention = torch_name(a.attention)  # transformers' spelling of the one name
        report = compare_model(a.hf_config, batch, seq, a.precision, attention, a.cache, dropout, a.device, progress,
                               layers, calibration)
    finally:
        bar.close()
    print(json.dumps(report.to_json(), indent=2) if a.json else str(report))
    return 0
