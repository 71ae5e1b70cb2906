"""``labkit estimate``: the per-device memory of one training setup, as text or JSON."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from typing import Any

from labkit.cli.common import count_text, parse_int, parse_zero, table
from labkit.cli.shape_args import SHAPE_FLAGS, add_shape_flags, shape_from_args
from labkit.errors import require_choice
from labkit.estimate import (
    ATTENTION,
    PRECISIONS,
    RECOMPUTE,
    TrainingSetup,
    estimate_memory,
    model_state_bytes,
)
from labkit.hardware import GB, load_catalogue

CATEGORIES = ("parameters", "gradients", "optimizer", "activations", "total")


def estimate(a: argparse.Namespace) -> dict[str, Any]:
    """The estimate as plain data (bytes), exactly what ``--json`` prints."""
    shape = shape_from_args(a)
    ints = {k: parse_int(k, getattr(a, k)) for k in ("micro_batch", "dp", "tp", "pp")}
    seq = parse_int("seq", a.seq) if a.seq is not None else 0
    zero = parse_zero(a.zero)
    require_choice("recompute", a.recompute, RECOMPUTE)
    require_choice("attention", a.attention, ATTENTION)
    device = load_catalogue().gpu(a.gpu) if a.gpu is not None else None
    if shape is None:
        params = parse_int("params", a.params)
        states = model_state_bytes(params, a.precision, zero, ints["dp"])
        per_device = {k: v / (ints["tp"] * ints["pp"]) for k, v in states.items()}
        per_device |= {"activations": 0.0, "total": sum(per_device.values())}
        setup = {"precision": a.precision, "zero_stage": zero} | {k: ints[k] for k in ("dp", "tp", "pp")}
        out = {"model": None, "params": params, "per_device_bytes": per_device,
               "activations_per_layer_bytes": None, "setup": setup}  # fmt: skip
    else:
        ts = TrainingSetup(shape, seq=seq, precision=a.precision, recompute=a.recompute,
                           attention=a.attention, sp=a.sp, zero_stage=zero, **ints)  # fmt: skip
        est = estimate_memory(ts)
        setup = {k: v for k, v in asdict(ts).items() if k != "shape"} | {"seq": ts.seq_len}
        if shape.name == "custom":
            setup["shape"] = {f: getattr(shape, f) for f in (*SHAPE_FLAGS, "ffn")}
        out = {"model": shape.name, "params": est.params, "per_device_bytes": dict(est.per_device_bytes),
               "activations_per_layer_bytes": est.activations_per_layer_bytes, "setup": setup}  # fmt: skip
    if device is not None:
        headroom = device.memory_bytes - out["per_device_bytes"]["total"]
        out |= {"gpu": device.name, "device_bytes": device.memory_bytes, "fits": headroom >= 0,
                "headroom_bytes": headroom}  # fmt: skip
    return out


def format_estimate(out: dict[str, Any]) -> str:
    """The estimate for people: GB (1e9 bytes), the activations' share and the fit."""
    s, per = out["setup"], out["per_device_bytes"]
    layout = f"dp {s['dp']}, tp {s['tp']}, pp {s['pp']}, ZeRO stage {s['zero_stage']}"
    name = f"{out['model']}: " if out["model"] else ""
    lines = [f"{name}{count_text(out['params'])} parameters, {s['precision']}"]
    if out["activations_per_layer_bytes"] is None:
        lines.append(f"{layout} (model states only: activations need --model or a shape)")
    else:
        lines.append(
            f"micro-batch {s['micro_batch']}, seq {s['seq']}, {layout}" + (", sp" if s["sp"] else "")
        )
        lines.append(f"recompute {s['recompute']}, attention {s['attention']}")
    rows = [[k, f"{per[k] / GB:,.2f}"] for k in CATEGORIES]
    lines += ["", table(["per device", "GB"], rows), "(GB = 1e9 bytes)"]
    if out["activations_per_layer_bytes"] is not None and per["total"]:
        lines.append(f"activations are {100 * per['activations'] / per['total']:.1f}% of the total "
                     f"({out['activations_per_layer_bytes'] / GB:.3f} GB per layer)")  # fmt: skip
    if "gpu" in out:
        where = f"{out['gpu']} ({out['device_bytes'] / 2**30:.1f} GiB = {out['device_bytes'] / GB:.1f} GB)"
        gap = abs(out["headroom_bytes"]) / GB
        lines.append(f"fits on {where}: yes, {gap:,.1f} GB to spare" if out["fits"] else
                     f"does not fit on {where}: short by {gap:,.1f} GB")  # fmt: skip
    return "\n".join(lines)




def register(sub: argparse._SubParsersAction) -> None:
    est = sub.add_parser("estimate", help="per-device memory of a training setup")
    add_shape_flags(est)
    est.add_argument("--micro-batch", default="1")
    for flag in ("dp", "tp", "pp"):
        est.add_argument(f"--{flag}", default="1", help=f"{flag} degree (default 1)")
    est.add_argument("--sp", action="store_true", help="sequence parallelism (needs tp > 1)")
    est.add_argument("--zero", default="0", help="ZeRO stage: 0, 1, 2, 3")
    est.add_argument("--recompute", default="none", help=", ".join(RECOMPUTE))
    est.add_argument("--precision", default="bf16-mixed", help=", ".join(PRECISIONS))
    est.add_argument("--attention", default="explicit", help=", ".join(ATTENTION))
    est.add_argument("--gpu", help="a GPU of the catalogue: does it fit?")
    est.add_argument("--json", action="store_true", help="print bytes as JSON")
    est.set_defaults(run=run)


def run(a: argparse.Namespace) -> int:
    out = estimate(a)
    print(json.dumps(out, indent=2) if a.json else format_estimate(out))
    return 0
