"""``labkit advise``: the advisor's ranked plans for a model on a cluster."""

from __future__ import annotations

import argparse
import json

from labkit.cli.common import parse_int
from labkit.errors import LabkitError


def advise(a: argparse.Namespace) -> str:
    """``labkit advise``: the advisor's ranked plans as text, or as JSON with ``--json``."""
    from labkit.advisor.report import advice_json, advice_text
    from labkit.advisor.search import advise as search
    from labkit.shapes import model_names

    for name in ("model", "batch"):
        if getattr(a, name) is None:
            extra = f" (one of {', '.join(model_names())})" if name == "model" else ""
            raise LabkitError(f"{name} must be given: --{name} ...{extra}")
    seq = parse_int("seq", a.seq) if a.seq is not None else 0
    top = parse_int("top", a.top, positive=False)
    if top < 0:
        raise LabkitError(f"top must be a non-negative integer (got {a.top!r})")
    adv = search(a.model, parse_int("batch", a.batch), a.gpu, parse_int("gpus", a.gpus), a.goal, seq=seq,
                 gpus_per_node=parse_int("gpus_per_node", a.gpus_per_node))
    return json.dumps(advice_json(adv, top), indent=2) if a.json else advice_text(adv, top)


def register(sub: argparse._SubParsersAction) -> None:
    adv = sub.add_parser("advise", help="rank the parallel and memory plans of a model on a cluster")
    adv.add_argument("--model", help="a preset (e.g. gpt3-175b, llama2-7b)")
    adv.add_argument("--gpu", default="A100-80GB", help="a GPU of the catalogue (default A100-80GB)")
    adv.add_argument("--gpus", default="8", help="GPU count (default 8)")
    adv.add_argument("--gpus-per-node", default="8", help="GPUs per node, sharing NVLink (default 8)")
    adv.add_argument("--batch", help="global batch, in sequences")
    adv.add_argument("--seq", help="sequence length (default: the model's context length)")
    adv.add_argument("--goal", default="fastest", help="fit, fastest, cheapest, greenest")
    adv.add_argument("--top", default="5", help="plans to show (default 5)")
    adv.add_argument("--json", action="store_true", help="print the plans as JSON (bytes, seconds, USD, J, kg)")
    adv.set_defaults(run=run)


def run(a: argparse.Namespace) -> int:
    print(advise(a))
    return 0
