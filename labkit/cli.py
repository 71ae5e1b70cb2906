"""``labkit estimate``, ``labkit hardware``, ``labkit advise`` and ``labkit bench``: the lab from a terminal.

Every value is parsed as a string and converted here, so that a bad one, whatever
it is, goes through one path: a single line ``labkit: error: <message>`` on stderr
and exit status 2, with the message the API itself raises (it names the field and
the allowed values). Only argparse's own usage errors (an unknown flag) keep
argparse's multi-line form.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import asdict
from typing import Any

from labkit.errors import LabkitError, require_choice, require_positive
from labkit.estimate import (
    ATTENTION,
    PRECISIONS,
    RECOMPUTE,
    ZERO_STAGES,
    TrainingSetup,
    estimate_memory,
    model_state_bytes,
)
from labkit.hardware import GB, load_catalogue
from labkit.shapes import ModelShape, model_shape

SHAPE_FLAGS = ("layers", "hidden", "heads", "seq", "vocab")
CATEGORIES = ("parameters", "gradients", "optimizer", "activations", "total")


def _int(field: str, text: str, *, positive: bool = True) -> int:
    """An integer from the command line ("8", "7.5e9"); anything else names the field."""
    try:
        value = int(text)
    except ValueError:
        try:
            number = float(text)
        except ValueError:
            number = math.nan
        if not (math.isfinite(number) and number.is_integer()):
            raise LabkitError(f"{field} must be a positive integer (got {text!r})") from None
        value = int(number)
    return require_positive(field, value) if positive else value


def _zero(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        return require_choice("zero_stage", text, ZERO_STAGES)


def _shape(a: argparse.Namespace) -> ModelShape | None:
    """The preset, the custom shape, or None for ``--params`` (exactly one must be given)."""
    custom = {f: getattr(a, f) for f in ("layers", "hidden", "heads", "vocab", "ffn") if getattr(a, f)}
    if a.params is not None:
        if a.model or custom:
            raise LabkitError("params must be given alone: not with --model or the shape flags")
        return None
    if a.model:
        if custom:
            raise LabkitError("model must be given alone: not with the shape flags " + ", ".join(custom))
        return model_shape(a.model)
    if not custom:
        raise LabkitError("model must be given: --model NAME, --params N, or --" + " --".join(SHAPE_FLAGS))
    given = {**custom, "seq": a.seq}
    missing = [f"--{f}" for f in SHAPE_FLAGS if given.get(f) is None]
    if missing:
        flags = ", ".join("--" + f for f in SHAPE_FLAGS)
        raise LabkitError(f"shape needs {flags} together (missing {', '.join(missing)})")
    sizes = {f: _int(f, given[f]) for f in SHAPE_FLAGS}
    return ModelShape(name="custom", **sizes, ffn=_int("ffn", a.ffn, positive=False) if a.ffn else 0)


def estimate(a: argparse.Namespace) -> dict[str, Any]:
    """The estimate as plain data (bytes), exactly what ``--json`` prints."""
    shape = _shape(a)
    ints = {k: _int(k, getattr(a, k)) for k in ("micro_batch", "dp", "tp", "pp")}
    seq = _int("seq", a.seq) if a.seq is not None else 0
    zero = _zero(a.zero)
    require_choice("recompute", a.recompute, RECOMPUTE)
    require_choice("attention", a.attention, ATTENTION)
    device = load_catalogue().gpu(a.gpu) if a.gpu is not None else None
    if shape is None:
        params = _int("params", a.params)
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


def _count(n: float) -> str:
    for size, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        if n >= size:
            return f"{n / size:.1f} {suffix}"
    return f"{n:.0f}"


def _is_number(cell: str) -> bool:
    try:
        float(cell.replace(",", ""))
    except ValueError:
        return cell == "-"
    return True


def _table(headers: list[str], rows: list[list[Any]]) -> str:
    """Columns padded to their widest cell: text left, numbers right."""
    body = [["-" if c is None else str(c) for c in r] for r in rows]
    cells = [headers, *body]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    right = [all(_is_number(r[i]) for r in body) for i in range(len(headers))]

    def line(r: list[str]) -> str:
        return "  ".join(
            c.rjust(w) if n else c.ljust(w) for c, w, n in zip(r, widths, right, strict=True)
        ).rstrip()

    return "\n".join([line(headers), line(["-" * w for w in widths]), *map(line, body)])


def format_estimate(out: dict[str, Any]) -> str:
    """The estimate for people: GB (1e9 bytes), the activations' share and the fit."""
    s, per = out["setup"], out["per_device_bytes"]
    layout = f"dp {s['dp']}, tp {s['tp']}, pp {s['pp']}, ZeRO stage {s['zero_stage']}"
    name = f"{out['model']}: " if out["model"] else ""
    lines = [f"{name}{_count(out['params'])} parameters, {s['precision']}"]
    if out["activations_per_layer_bytes"] is None:
        lines.append(f"{layout} (model states only: activations need --model or a shape)")
    else:
        lines.append(
            f"micro-batch {s['micro_batch']}, seq {s['seq']}, {layout}" + (", sp" if s["sp"] else "")
        )
        lines.append(f"recompute {s['recompute']}, attention {s['attention']}")
    rows = [[k, f"{per[k] / GB:,.2f}"] for k in CATEGORIES]
    lines += ["", _table(["per device", "GB"], rows), "(GB = 1e9 bytes)"]
    if out["activations_per_layer_bytes"] is not None and per["total"]:
        lines.append(f"activations are {100 * per['activations'] / per['total']:.1f}% of the total "
                     f"({out['activations_per_layer_bytes'] / GB:.3f} GB per layer)")  # fmt: skip
    if "gpu" in out:
        where = f"{out['gpu']} ({out['device_bytes'] / GB:.1f} GB)"
        gap = abs(out["headroom_bytes"]) / GB
        lines.append(f"fits on {where}: yes, {gap:,.1f} GB to spare" if out["fits"] else
                     f"does not fit on {where}: short by {gap:,.1f} GB")  # fmt: skip
    return "\n".join(lines)


def hardware_json() -> dict[str, Any]:
    cat = load_catalogue()
    return {"gpus": [asdict(g) for g in cat.gpus], "tiers": [asdict(t) for t in cat.tiers],
            "links": [asdict(li) for li in cat.links]}  # fmt: skip


def format_hardware() -> str:
    cat = load_catalogue()
    gpus = [[g.name, f"{g.memory_bytes / GB:.1f}", f"{g.memory_bandwidth / 1e12:.2f}", g.nvlink or "none",
             g.pcie, f"{g.tdp_watts:.0f}"] for g in cat.gpus]  # fmt: skip
    tiers = [[t.name, t.kind, f"{t.capacity_bytes / GB:,.0f}", f"{t.read_bandwidth / GB:.2f}",
              f"{t.write_bandwidth / GB:.2f}", f"{t.latency_s * 1e6:g}", f"{t.price_usd_per_gb:g}"]
             for t in cat.tiers]  # fmt: skip
    links = [[li.name, li.kind, f"{li.bandwidth / GB:.1f}", f"{li.latency_s * 1e6:g}"] for li in cat.links]
    return "\n\n".join([
        "GPUs\n" + _table(["name", "memory GB", "bandwidth TB/s", "NVLink", "PCIe", "TDP W"], gpus),
        "Memory and storage tiers\n" + _table(
            ["name", "kind", "capacity GB", "read GB/s", "write GB/s", "latency us", "USD/GB"], tiers),
        "Links\n" + _table(["name", "kind", "bandwidth GB/s (per direction)", "latency us"], links),
        "GB = 1e9 bytes, TB = 1e12 bytes; figures and sources in datasets/hardware.toml",
    ])  # fmt: skip


def advise(a: argparse.Namespace) -> str:
    """``labkit advise``: the advisor's ranked plans as text, or as JSON with ``--json``."""
    from labkit.advisor.report import advice_json, advice_text
    from labkit.advisor.search import advise as search
    from labkit.shapes import model_names

    for name in ("model", "batch"):
        if getattr(a, name) is None:
            extra = f" (one of {', '.join(model_names())})" if name == "model" else ""
            raise LabkitError(f"{name} must be given: --{name} ...{extra}")
    seq = _int("seq", a.seq) if a.seq is not None else 0
    top = _int("top", a.top, positive=False)
    if top < 0:
        raise LabkitError(f"top must be a non-negative integer (got {a.top!r})")
    adv = search(a.model, _int("batch", a.batch), a.gpu, _int("gpus", a.gpus), a.goal, seq=seq,
                 gpus_per_node=_int("gpus_per_node", a.gpus_per_node))
    return json.dumps(advice_json(adv, top), indent=2) if a.json else advice_text(adv, top)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="labkit", description="Memory and storage of large-model training.")
    sub = parser.add_subparsers(dest="command", required=True)
    est = sub.add_parser("estimate", help="per-device memory of a training setup")
    est.add_argument("--model", help="a preset (e.g. gpt3-175b, llama2-7b)")
    est.add_argument("--params", help="a parameter count alone: model states only")
    for flag in ("layers", "hidden", "heads", "vocab", "ffn"):
        est.add_argument(f"--{flag}", help="custom shape (ffn optional, default 4*hidden)")
    est.add_argument("--seq", help="sequence length (overrides a preset's context length)")
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
    hw = sub.add_parser("hardware", help="the hardware catalogue")
    hw.add_argument("--json", action="store_true")
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
    bench = sub.add_parser("bench", help="measurement overhead and measured-vs-predicted error")
    bench.add_argument("--notebooks", action="store_true", help="also time each labs/*.ipynb, headless")
    bench.add_argument("--quick", action="store_true", help="fewer steps and configurations")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "estimate":
            out = estimate(args)
            print(json.dumps(out, indent=2) if args.json else format_estimate(out))
        elif args.command == "advise":
            print(advise(args))
        elif args.command == "hardware":
            print(json.dumps(hardware_json(), indent=2) if args.json else format_hardware())
        else:
            from labkit import bench

            return bench.main(["--notebooks"] * args.notebooks + ["--quick"] * args.quick)
    except LabkitError as err:
        print("labkit: error: " + " ".join(str(err).split()), file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
