"""``labkit estimate``: the per-device memory of one training setup, or the largest model that fits.

Model states follow a named convention (``labkit.predict.conventions``): ``zero`` (ZeRO's 16 bytes per
parameter, GB = 1e9) or ``deepspeed`` (the arithmetic of DeepSpeed's estimators: 18 bytes per
parameter partitioned, a ZeRO-3 gather buffer of 4 bytes x the largest layer, GiB = 2**30), with
the optimizer and the parameters offloaded to the CPU or not: the papers' figures, printed as model-state
conventions. The fit verdict is judged on the whole step's predicted peak (``labkit.predict.step_peak``:
activations, the loss's fp32 logits and their gradients, AdamW's temporaries, cuBLAS's workspaces) with
the caching allocator's measured margin stated beside it (``labkit.predict.allocator``), for one GPU's
step without tensor, pipeline or ZeRO sharding; other layouts are judged on the model states plus the
activations, and say so. ``--largest`` answers the largest parameter count whose model states fit the GPU
(``labkit.predict.largest``). Fit verdicts use the GPU's true capacity unless ``--capacity nominal`` asks for
the marketed figure (ZeRO's tables use it).
"""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import asdict
from typing import Any

from labkit.cli.common import parse_int, parse_zero, table
from labkit.cli.estimate_peak import peak_lines, predicted_peak, step_time
from labkit.cli.finetune_args import add_finetune_flags, estimate_finetune, format_finetune
from labkit.cli.shape_args import SHAPE_FLAGS, add_shape_flags, shape_from_args
from labkit.errors import LabkitError, require_choice
from labkit.predict.attention import attention_kind
from labkit.predict.conventions import CONVENTIONS, DEFAULT_UNITS, OFFLOAD_DEVICES, UNITS, StateSetup, model_states
from labkit.predict.estimate import PRECISIONS, RECOMPUTE, TrainingSetup, estimate_memory, model_state_bytes
from labkit.predict.largest import largest_params

CATEGORIES = ("parameters", "gradients", "optimizer", "gather_buffer", "activations", "total")
CAPACITIES = ("true", "nominal")


def _flag(name: str, value: str | None, allowed) -> str:
    """A choice flag's value, or a one-line error naming the flag and what it allows."""
    if value not in allowed:
        raise LabkitError(f"--{name} must be one of {', '.join(allowed)} (got {value!r})")
    return value


def _layout(a: argparse.Namespace) -> dict[str, Any]:
    """dp, tp, pp, ZeRO stage, nodes and GPUs per node, offload and the convention, checked flag by flag."""
    tp, pp = parse_int("tp", a.tp), parse_int("pp", a.pp)
    conv = _flag("convention", a.convention, CONVENTIONS)
    out = {"convention": conv, "units": _flag("units", a.units or DEFAULT_UNITS[conv], tuple(UNITS)),
           "offload_optimizer": _flag("offload-optimizer", a.offload_optimizer, OFFLOAD_DEVICES),
           "offload_param": _flag("offload-param", a.offload_param, OFFLOAD_DEVICES),
           "largest_layer": parse_int("largest-layer", a.largest_layer) if a.largest_layer is not None else 0,
           "zero_init": _flag("zero-init", a.zero_init, ("1", "0")) == "1", "zero_stage": parse_zero(a.zero),
           "tp": tp, "pp": pp}
    dp = parse_int("dp", a.dp) if a.dp is not None else None
    if a.nodes is not None or a.gpus_per_node is not None:
        nodes = parse_int("nodes", a.nodes) if a.nodes is not None else 1
        per = parse_int("gpus-per-node", a.gpus_per_node) if a.gpus_per_node is not None else 1
        gpus = nodes * per
        if gpus % (tp * pp) or (dp is not None and dp * tp * pp != gpus):
            need = f"{gpus // (tp * pp)}" if gpus % (tp * pp) == 0 else "an integer"
            raise LabkitError(f"--dp must be nodes x gpus-per-node / (tp x pp) = {gpus} / {tp * pp} = {need} "
                              f"(got dp={dp if dp is not None else 'none'})")
        dp = gpus // (tp * pp)
    else:
        dp = dp or 1
        gpus = dp * tp * pp
        per = next(d for d in (8, 4, 2, 1) if gpus % d == 0)
    off = out["offload_optimizer"] != "none" or out["offload_param"] != "none"
    if off and out["zero_stage"] == 0:
        raise LabkitError("--offload-optimizer and --offload-param need --zero 1, 2 or 3 (got --zero 0)")
    if out["offload_param"] != "none" and (out["zero_stage"] != 3 or out["offload_optimizer"] == "none"):
        raise LabkitError("--offload-param cpu needs --zero 3 and --offload-optimizer cpu")
    return out | {"dp": dp, "gpus_per_node": per, "nodes": gpus / per}


def _states(params: int, precision: str, lay: dict[str, Any]) -> tuple[dict[str, float], float]:
    """Per-GPU state bytes by category and host bytes per node, under the layout's convention."""
    plain = lay["convention"] == "zero" and lay["offload_optimizer"] == lay["offload_param"] == "none"
    mp, stage = lay["tp"] * lay["pp"], lay["zero_stage"]
    if plain:  # ZeRO's count from labkit.predict.estimate, any precision
        per = {k: v / mp for k, v in model_state_bytes(params, precision, stage, lay["dp"]).items()}
        return per | {"gather_buffer": 4.0 * lay["largest_layer"] if stage == 3 else 0.0}, 0.0
    if precision not in ("bf16-mixed", "fp16-mixed"):
        raise LabkitError(f"precision must be one of bf16-mixed, fp16-mixed with --convention {lay['convention']} "
                          f"or offload (got {precision!r})")
    setup = StateSetup(params, stage, lay["dp"], mp, lay["gpus_per_node"], lay["offload_optimizer"],
                       lay["offload_param"], lay["largest_layer"], lay["zero_init"])
    st = model_states(setup, lay["convention"])
    return dict(st.gpu), st.host_per_node


def _setup_json(lay: dict[str, Any]) -> dict[str, Any]:
    keys = ("zero_stage", "dp", "tp", "pp", "nodes", "gpus_per_node", "offload_optimizer", "offload_param",
            "largest_layer", "zero_init")
    return {k: lay[k] for k in keys}


def _capacity(a: argparse.Namespace, device) -> tuple[float, str]:
    which = _flag("capacity", a.capacity, CAPACITIES)
    return (device.memory_bytes if which == "true" else device.memory_nominal_bytes), which


def largest(a: argparse.Namespace) -> dict[str, Any]:
    """The largest parameter count whose model states fit one GPU (``--largest``)."""
    shape_flags = ("model", "layers", "hidden", "heads", "vocab", "hf_config")
    if a.params is not None or any(getattr(a, f, None) for f in shape_flags):
        raise LabkitError("largest answers the parameter count: give --largest without --model, --params or a shape")
    if a.gpu is None:
        raise LabkitError("gpu must be given with --largest: --gpu NAME (see labkit hardware)")
    from labkit.hardware import load_catalogue

    lay, device = _layout(a), load_catalogue().gpu(a.gpu)
    cap, which = _capacity(a, device)
    ans = largest_params(cap, lay["zero_stage"], lay["dp"], lay["tp"] * lay["pp"], lay["convention"],
                         lay["offload_optimizer"], lay["offload_param"], lay["largest_layer"], lay["gpus_per_node"])
    bounded = math.isfinite(ans.params)
    return {"largest_params": int(ans.params) if bounded else None, "bounded": bounded, "gpu": device.name,
            "capacity": which, "capacity_bytes": cap, "bytes_per_param": ans.bytes_per_param,
            "fixed_bytes": ans.fixed_bytes, "convention": lay["convention"], "units": lay["units"],
            "counts": "model states only", "setup": _setup_json(lay)}


def estimate(a: argparse.Namespace) -> dict[str, Any]:
    """The estimate as plain data (bytes), exactly what ``--json`` prints."""
    if a.largest:
        return largest(a)
    shape = shape_from_args(a)
    if getattr(a, "finetune", None) is not None:
        return estimate_finetune(a, shape)
    lay = _layout(a)
    mb = parse_int("micro_batch", a.micro_batch)
    seq = parse_int("seq", a.seq) if a.seq is not None else 0
    require_choice("recompute", a.recompute, RECOMPUTE)
    a.attention = attention_kind(a.attention)
    require_choice("precision", a.precision, PRECISIONS)
    from labkit.hardware import load_catalogue

    device = load_catalogue().gpu(a.gpu) if a.gpu is not None else None
    setup = {"precision": a.precision} | _setup_json(lay)
    ts = est = None
    if shape is None:
        params = parse_int("params", a.params)
        acts, per_layer, model = 0.0, None, None
    else:
        ts = TrainingSetup(shape, seq=seq, precision=a.precision, recompute=a.recompute, attention=a.attention,
                           sp=a.sp, zero_stage=lay["zero_stage"], micro_batch=mb,
                           **{k: lay[k] for k in ("dp", "tp", "pp")})  # fmt: skip
        est = estimate_memory(ts)
        params, acts, per_layer, model = est.params, est.per_device_bytes["activations"], \
            est.activations_per_layer_bytes, shape.name
        setup |= {k: v for k, v in asdict(ts).items() if k != "shape"} | {"seq": ts.seq_len}
        if shape.name == "custom":
            setup["shape"] = {f: getattr(shape, f) for f in (*SHAPE_FLAGS, "ffn")}
    states, host = _states(params, a.precision, lay)
    per_device = states | {"activations": acts}
    per_device["total"] = sum(per_device.values())
    out = {"model": model, "params": params, "convention": lay["convention"], "units": lay["units"],
           "per_device_bytes": per_device, "host_bytes_per_node": host, "activations_per_layer_bytes": per_layer,
           "setup": setup}  # fmt: skip
    plain = lay["offload_optimizer"] == lay["offload_param"] == "none"
    peak = predicted_peak(a, shape, ts, est, states) if shape is not None and plain else None
    out["step_peak"] = peak
    if device is not None:
        cap, which = _capacity(a, device)
        usable = device.usable_memory_bytes if which == "true" else cap  # what torch can allocate of it
        # a step's peak is never below its own states and activations (a convention's larger states included)
        headroom = usable - (per_device["total"] if peak is None else max(peak["bytes"], per_device["total"]))
        out |= {"gpu": device.name, "capacity": which, "device_bytes": cap, "usable_bytes": usable,
                "usable_source": device.usable_source if which == "true" else "the nominal capacity",
                "fits": headroom >= 0,
                "headroom_bytes": headroom, "judged_on": "model states + activations" if peak is None else
                "predicted whole-step peak", "step_time": step_time(a, ts, device)}  # fmt: skip
    return out


def count_text(n: float) -> str:
    """A parameter count in words: "bn" and "tn" for counts, never "B" (bytes)."""
    for size, suffix in ((1e12, " tn"), (1e9, " bn"), (1e6, " M"), (1e3, " thousand")):
        if n >= size:
            return f"{n / size:.1f}{suffix}"
    return f"{n:.0f}"


def _unit_note(units: str) -> str:
    return "(GB = 1e9 bytes)" if units == "GB" else "(GiB = 2**30 bytes; DeepSpeed's estimators print it as \"GB\")"


def _format_largest(out: dict[str, Any]) -> str:
    s, u = out["setup"], out["units"]
    layout = (f"ZeRO stage {s['zero_stage']}, dp {s['dp']}, tp {s['tp']}, pp {s['pp']}, offload optimizer "
              f"{s['offload_optimizer']}, parameters {s['offload_param']}")
    where = f"{out['gpu']} ({out['capacity']} capacity, {out['capacity_bytes'] / UNITS[u]:,.2f} {u})"
    answer = (f"{count_text(out['largest_params'])} parameters ({out['largest_params']:,})" if out["bounded"] else
              "not bounded by GPU memory: every state is offloaded")
    per = f"{out['bytes_per_param']:.4g} bytes per parameter on the GPU" + (
        f" + {out['fixed_bytes'] / UNITS[u]:,.3f} {u} gather buffer" if out["fixed_bytes"] else "")
    return "\n".join([f"largest model whose states fit {where}", layout, f"convention {out['convention']}: {per}",
                      f"-> {answer}", f"(model states only; activations and buffers need room too) {_unit_note(u)}"])


def format_estimate(out: dict[str, Any]) -> str:
    """The estimate for people, in the convention's units: the categories, host memory and the fit."""
    if "largest_params" in out:
        return _format_largest(out)
    if "finetune" in out:
        return format_finetune(out)
    s, per, u = out["setup"], out["per_device_bytes"], out["units"]
    unit = UNITS[u]
    layout = f"dp {s['dp']}, tp {s['tp']}, pp {s['pp']}, ZeRO stage {s['zero_stage']}"
    if s["offload_optimizer"] != "none":
        layout += f", optimizer offloaded to {s['offload_optimizer']}"
    if s["offload_param"] != "none":
        layout += f", parameters offloaded to {s['offload_param']}"
    name = f"{out['model']}: " if out["model"] else ""
    lines = [f"{name}{count_text(out['params'])} parameters, {s['precision']}, convention {out['convention']}"]
    if out["activations_per_layer_bytes"] is None:
        lines.append(f"{layout} (model states only: activations need --model or a shape)")
    else:
        lines.append(f"micro-batch {s['micro_batch']}, seq {s['seq']}, {layout}" + (", sp" if s["sp"] else ""))
        lines.append(f"recompute {s['recompute']}, attention {s['attention']}")
    rows = [[k, f"{per[k] / unit:,.2f}"] for k in CATEGORIES if k != "gather_buffer" or per[k]]
    lines += ["", table([f"per device (model states: convention {out['convention']})", u], rows), _unit_note(u)]
    if out["host_bytes_per_node"]:
        lines.append(f"host memory per node ({s['gpus_per_node']} GPUs): {out['host_bytes_per_node'] / unit:,.2f} {u}")
    if out["activations_per_layer_bytes"] is not None and per["total"]:
        lines.append(f"activations are {100 * per['activations'] / per['total']:.1f}% of the total "
                     f"({out['activations_per_layer_bytes'] / unit:.3f} {u} per layer)")  # fmt: skip
    return "\n".join(lines + peak_lines(out, unit, u))


def register(sub: argparse._SubParsersAction) -> None:
    est = sub.add_parser("estimate", help="per-device memory of a training setup, or the largest model that fits")
    add_shape_flags(est)
    est.add_argument("--micro-batch", default="1")
    est.add_argument("--dp", help="data-parallel degree (default 1, or nodes x gpus-per-node / (tp x pp))")
    for flag in ("tp", "pp"):
        est.add_argument(f"--{flag}", default="1", help=f"{flag} degree (default 1)")
    est.add_argument("--nodes", help="nodes (with --gpus-per-node: sets dp)")
    est.add_argument("--gpus-per-node", help="GPUs per node (default 1 with --nodes; host memory is per node)")
    est.add_argument("--sp", action="store_true", help="sequence parallelism (needs tp > 1)")
    est.add_argument("--zero", default="0", help="ZeRO stage: 0, 1, 2, 3")
    est.add_argument("--convention", default="zero", help="zero (16 B/param, GB) or deepspeed (18 B/param, GiB)")
    est.add_argument("--offload-optimizer", default="none", help="none or cpu (ZeRO-Offload)")
    est.add_argument("--offload-param", default="none", help="none or cpu (ZeRO-3 with --offload-optimizer cpu)")
    est.add_argument("--largest-layer", help="parameters of the largest layer: ZeRO-3's 4-byte gather buffer")
    est.add_argument("--zero-init", default="1", help="deepspeed host memory with zero.Init: 1 (default) or 0")
    est.add_argument("--units", help="GB (1e9) or GiB (2**30); default: the convention's")
    est.add_argument("--recompute", default="none", help=", ".join(RECOMPUTE))
    est.add_argument("--precision", default="bf16-mixed", help=", ".join(PRECISIONS))
    est.add_argument("--attention", default="fused", help="fused (default: FlashAttention/sdpa; also flash, sdpa), "
                     "explicit (s x s scores in memory; also eager)")
    est.add_argument("--gpu", help="a GPU of the catalogue: does it fit?")
    est.add_argument("--capacity", default="true", help="true (default) or nominal (the marketed GB x 1e9)")
    est.add_argument("--largest", action="store_true", help="the largest parameter count whose states fit --gpu")
    est.add_argument("--calibration", help="a labkit calibrate file: the step's time on its measured rates too")
    est.add_argument("--json", action="store_true", help="print bytes as JSON")
    add_finetune_flags(est)
    est.set_defaults(run=run)


def run(a: argparse.Namespace) -> int:
    out = estimate(a)
    print(json.dumps(out, indent=2) if a.json else format_estimate(out))
    return 0
