"""``labkit advise --finetune lora|qlora``: the cheapest single card that fits, or the fewest GPUs that do.

Every GPU of the catalogue is judged on the fine-tune's predicted whole-step peak
(``labkit.predict.finetune_fit``). A card that holds the whole step alone is ranked by its listed
price (``price_usd``, dated in ``datasets/hardware.toml``). When no card does, the frozen base is sharded
FSDP-style over n GPUs of one kind (each keeps 1/n of it and gathers one layer's frozen weights at a time;
adapters, their states and the activations stay whole on every GPU, data parallel): the fewest n that
fit is given per card. A sketch of that layout's memory, not a measured one: it is said in the output.
"""

from __future__ import annotations

import argparse
import json
import math
from typing import Any

from labkit.cli.common import parse_int
from labkit.cli.finetune_args import finetune_from_args
from labkit.cli.shape_args import shape_from_args
from labkit.errors import LabkitError
from labkit.predict.finetune import Finetune, frozen_bytes
from labkit.predict.finetune_fit import fit
from labkit.shapes import ModelShape

GB = 1e9
MAX_GPUS = 64


def _gathered_layer(shape: ModelShape, ft: Finetune) -> float:
    """One layer's frozen weights, gathered while it computes (NF4 or 16-bit, as stored)."""
    from dataclasses import replace

    return (frozen_bytes(replace(shape, layers=2), ft, "bf16-mixed")
            - frozen_bytes(replace(shape, layers=1), ft, "bf16-mixed"))


def fewest_gpus(shape: ModelShape, ft: Finetune, batch: int, seq: int, device) -> int | None:
    """The fewest GPUs of ``device``'s kind whose share of a sharded frozen base fits; None past ``MAX_GPUS``."""
    one = fit(shape, ft, batch, seq, device)
    if one["fits"]:
        return 1
    frozen = frozen_bytes(shape, ft, "bf16-mixed")
    rest = one["bytes"] - frozen + _gathered_layer(shape, ft)
    room = one["usable_bytes"] - rest
    if room <= 0:
        return None
    n = max(2, math.ceil(frozen / room))
    return n if n <= MAX_GPUS else None


def finetune_advice(shape: ModelShape, ft: Finetune, batch: int, seq: int) -> dict[str, Any]:
    """Every card of the catalogue: the single-card verdict, its price, and the fewest GPUs that fit."""
    from labkit.hardware import load_catalogue

    rows = []
    for device in load_catalogue().gpus:
        f = fit(shape, ft, batch, seq, device)
        rows.append({"gpu": device.name, "fits_alone": f["fits"], "peak_bytes": f["bytes"],
                     "headroom_bytes": f["headroom_bytes"], "price_usd": device.price_usd,
                     "fewest_gpus": fewest_gpus(shape, ft, batch, seq, device)})
    alone = sorted((r for r in rows if r["fits_alone"]), key=lambda r: r["price_usd"])
    many = sorted((r for r in rows if r["fewest_gpus"]), key=lambda r: (r["fewest_gpus"], r["price_usd"]))
    return {"model": shape.name, "finetune": ft.method, "rank": ft.rank, "targets": list(ft.targets), "seq": seq,
            "micro_batch": batch, "gradient_checkpointing": ft.checkpointing, "cards": rows,
            "cheapest_single": alone[0]["gpu"] if alone else None,
            "fewest": None if not many else {"gpu": many[0]["gpu"], "gpus": many[0]["fewest_gpus"]},
            "sharding": "frozen base sharded FSDP-style over n GPUs, one layer gathered at a time; the rest "
                        "replicated (a sketch of that layout, not measured)"}


def advise_finetune(a: argparse.Namespace) -> int:
    """Print the advice (``--json`` for bytes); exit 0 when some layout fits, 1 when none does."""
    shape = shape_from_args(a)
    if shape is None:
        raise LabkitError("finetune needs a model shape: --hf-config, --model or the shape flags (not --params)")
    precision = getattr(a, "precision", None) or "bf16-mixed"
    if precision != "bf16-mixed":
        raise LabkitError(f"precision must be bf16-mixed with --finetune in advise (got {precision!r})")
    ft = finetune_from_args(a, shape, precision)
    batch = parse_int("micro_batch", a.micro_batch) if getattr(a, "micro_batch", None) else 1
    seq = parse_int("seq", a.seq) if getattr(a, "seq", None) else shape.seq
    out = finetune_advice(shape, ft, batch, seq)
    if getattr(a, "json", False):
        print(json.dumps(out, indent=2))
    else:
        print(format_advice(out))
    return 0 if out["cheapest_single"] or out["fewest"] else 1


def format_advice(out: dict[str, Any]) -> str:
    """The cards for people: peak, verdict, price, fewest GPUs; then the answer."""
    lines = [f"{out['model']}: {out['finetune']} r={out['rank']} on {','.join(out['targets'])}, micro-batch "
             f"{out['micro_batch']}, seq {out['seq']}, gradient checkpointing "
             f"{'on' if out['gradient_checkpointing'] else 'off'} (GB = 1e9 bytes)"]
    for r in out["cards"]:
        verdict = (f"fits alone, {r['headroom_bytes'] / GB:,.2f} GB spare" if r["fits_alone"] else
                   f"short by {-r['headroom_bytes'] / GB:,.2f} GB alone; "
                   + (f"fits on {r['fewest_gpus']}" if r["fewest_gpus"] else f"no fit within {MAX_GPUS}"))
        lines.append(f"  {r['gpu']:10} peak {r['peak_bytes'] / GB:7.2f} GB: {verdict} "
                     f"(list price ${r['price_usd']:,.0f})")
    if out["cheapest_single"]:
        lines.append(f"cheapest single card: {out['cheapest_single']}")
    elif out["fewest"]:
        lines.append(f"no single card fits; fewest GPUs: {out['fewest']['gpus']} x {out['fewest']['gpu']} "
                     f"({out['sharding']})")
    else:
        lines.append("no card of the catalogue fits, alone or sharded")
    return "\n".join(lines)
