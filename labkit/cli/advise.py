"""``labkit advise``: price an exact layout, or rank the plans of a model on a machine.

The shape is a preset or a shipped config (``--model``, ``--hf-config``; ``--seq`` required past 8,192
positions) or given whole (``--layers --hidden --heads --vocab --seq``, with ``--ffn``, ``--kv-heads``,
``--gated``, ``--untied`` and ``--norm rms|layer`` for Llama-style shapes). A layout given whole (``--dp
--tp --pp``, with ``--micro-batch --zero --recompute --schedule --chunks --offload --precision --sp
--attention --first-stage-layers --last-stage-layers --cp`` taking their defaults when left out) is priced
exactly as given and comes first, feasible or not; a partial one fixes what it gives and the search
fills the rest. ``--framework`` names the software profile, ``--network``/``--network-ports`` the link
between hosts, ``--tokens`` a whole run, ``--calibration`` a file measured on the GPU. Every plan prints
tokens/s and model TFLOP/s per GPU and MFU. Exit status: 0 when a plan fits, 1 when the layout given or
every plan does not fit (the nearest misses are printed), 2 for bad input.

``--from FILE`` takes the layout, batch, sequence and (where the file names it) the model from an engine's own
config, a torchtitan TOML, Megatron-LM arguments or a DeepSpeed ds_config (``labkit.cli.advise_from``), and
prints what it read, ignored and approximated; ``--export ENGINE FILE`` writes the chosen plan back.
"""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import replace

from labkit.advisor import assumptions, stages
from labkit.cli import advise_from
from labkit.cli.common import parse_int
from labkit.cli.finetune_advise import advise_finetune
from labkit.cli.finetune_args import add_finetune_flags
from labkit.cli.shape_args import add_shape_flags, shape_from_args
from labkit.errors import LabkitError, divisors, require_choice
from labkit.predict.attention import attention_kind
from labkit.predict.estimate import RECOMPUTE
from labkit.predict.profiles import DEFAULT_FRAMEWORK, FRAMEWORKS, profile
from labkit.shapes import ModelShape

LAYOUT_INTS = ("dp", "tp", "pp", "cp", "micro_batch", "chunks", "first_stage_layers", "last_stage_layers")
CHOICES = {"recompute": RECOMPUTE, "schedule": ("1f1b", "gpipe", "interleaved"),
           "offload": ("none", "dram", "nvme"), "precision": ("bf16-mixed", "fp32", "fp8"), "sp": ("on", "off")}


def _divisors(n: int) -> str:
    return ", ".join(str(d) for d in divisors(n))  # O(sqrt n)


def _shape(a: argparse.Namespace) -> ModelShape:
    from labkit.shapes import model_names

    cfg = getattr(a, "engine_config", None)
    given = advise_from.shape(a, cfg) if cfg is not None else None
    if given is not None:
        return given
    custom = [f for f in ("layers", "hidden", "heads", "vocab", "ffn") if getattr(a, f)]
    if a.model is None and a.params is None and not custom and not getattr(a, "hf_config", None):
        raise LabkitError(f"model must be given: --model ... (one of {', '.join(model_names())}) or the shape flags "
                          f"--layers --hidden --heads --vocab --seq")
    shape = shape_from_args(a)
    if shape is None:
        raise LabkitError("params must not be used with advise: a plan needs the shape (--model, or --layers "
                          "--hidden --heads --vocab --seq)")
    if a.kv_heads is not None:
        kv = parse_int("kv_heads", a.kv_heads)
        if shape.heads % kv:
            raise LabkitError(f"kv_heads must divide the {shape.heads} attention heads: one of "
                              f"{_divisors(shape.heads)} (got {kv})")
        shape = replace(shape, kv_heads=kv)
    return shape


def _layout(a: argparse.Namespace, shape: ModelShape, batch: int) -> dict:
    """The layout fields given on the command line, each checked against the shape and the batch."""
    fixed: dict = {}
    for name in LAYOUT_INTS:
        text = getattr(a, name)
        if text is not None:
            fixed[name] = parse_int(name, text)
    if a.zero is not None:
        fixed["zero_stage"] = require_choice("zero", parse_int("zero", a.zero, positive=False), (0, 1, 2, 3))
    for name, allowed in CHOICES.items():
        value = getattr(a, name)
        if value is not None:
            fixed[name] = require_choice(name, value, allowed)
    if "sp" in fixed:
        fixed["sp"] = fixed["sp"] == "on"
    if a.attention is not None:
        fixed["attention"] = attention_kind(a.attention)
    cp = fixed.get("cp", 1)
    if cp > 1 and fixed.get("attention") == "explicit":
        raise LabkitError(f"cp must be 1 with --attention explicit: context parallelism runs attention as a ring of "
                          f"fused blocks (Megatron-Core, in Transformer Engine's fused attention); use --attention "
                          f"fused (got cp={cp})")
    if shape.seq % (2 * cp):
        allowed = _divisors(shape.seq // 2) if shape.seq % 2 == 0 else "1"
        raise LabkitError(f"cp must split the {shape.seq} positions into 2 x cp equal chunks (Megatron's causal load "
                          f"balance): one of {allowed} (got {cp})")
    if shape.heads % fixed.get("tp", 1):
        raise LabkitError(f"tp must divide the {shape.heads} attention heads: one of {_divisors(shape.heads)} "
                          f"(got {fixed['tp']})")
    if ("first_stage_layers" in fixed or "last_stage_layers" in fixed) and "pp" not in fixed:
        raise LabkitError("first_stage_layers and last_stage_layers need --pp (the pipeline stages they split)")
    counts = stages.split(shape.layers, fixed.get("pp", 1), fixed.get("first_stage_layers", 0),
                          fixed.get("last_stage_layers", 0)) if "pp" in fixed else (shape.layers,)
    if fixed.get("chunks", 1) > 1:
        if fixed.get("schedule") != "interleaved":
            raise LabkitError(f"chunks must be 1 unless --schedule interleaved (got {fixed['chunks']})")
        for per_stage in sorted(set(counts)):
            if per_stage % fixed["chunks"]:
                raise LabkitError(f"chunks must divide the {per_stage} layers of a pipeline stage: one of "
                                  f"{_divisors(per_stage)} (got {fixed['chunks']})")
    if "dp" in fixed:
        if batch % fixed["dp"]:
            raise LabkitError(f"dp must divide the global batch {batch}: one of {_divisors(batch)} (got {fixed['dp']})")
        per_rank = batch // fixed["dp"]
        if per_rank % fixed.get("micro_batch", 1):
            raise LabkitError(f"micro_batch must divide the {per_rank} sequences per data-parallel rank "
                              f"(batch {batch} / dp {fixed['dp']}): one of {_divisors(per_rank)} "
                              f"(got {fixed['micro_batch']})")
    return fixed


def _gpus(a: argparse.Namespace, fixed: dict) -> int:
    whole = all(k in fixed for k in ("dp", "tp", "pp"))
    cp = fixed.get("cp", 1)
    product = fixed["dp"] * fixed["tp"] * fixed["pp"] * cp if whole else None
    if a.gpus is None and product is not None:
        return product
    gpus = parse_int("gpus", a.gpus) if a.gpus is not None else 8 * cp
    if product is not None and product != gpus:
        names, values = ("dp x tp x pp x cp", [*map(str, (fixed["dp"], fixed["tp"], fixed["pp"])), str(cp)]) \
            if cp > 1 else ("dp x tp x pp", [str(fixed[k]) for k in ("dp", "tp", "pp")])
        raise LabkitError(f"{names} must equal --gpus {gpus} (got {' x '.join(values)} = {product})")
    which = f"the {gpus} GPUs" + (" (the default; --gpus N for another count)" if a.gpus is None else "")
    for name in ("dp", "tp", "pp", "cp"):
        if name in fixed and gpus % fixed[name]:
            raise LabkitError(f"{name} must divide {which}: one of {_divisors(gpus)} (got {fixed[name]})")
    names = [n for n in ("dp", "tp", "pp", "cp") if n in fixed and fixed[n] > 1]
    model = math.prod(fixed[n] for n in names)
    if gpus % model:
        raise LabkitError(f"{' x '.join(names)} must divide {which} (got {' x '.join(str(fixed[n]) for n in names)} "
                          f"= {model})")
    return gpus


def _headroom(text: str) -> float:
    raw = text.strip()
    try:
        value = float(raw.removesuffix("%")) / (100 if raw.endswith("%") else 1)
    except ValueError:
        value = -1.0
    if not 0 <= value < 1:
        raise LabkitError(f"headroom must be a fraction of GPU memory kept free, 0 to 0.99 (or 0% to 99%) "
                          f"(got {text!r})")
    return value


def _calibration(path: str | None) -> object | None:
    """A calibration file measured on the machine (``labkit.hardware.calibration``), read without running code."""
    if path is None:
        return None
    try:
        from labkit.hardware import calibration
    except ImportError:
        raise LabkitError(f"calibration needs labkit.hardware.calibration, which this labkit lacks (got {path!r})") \
            from None
    return calibration.load(path)


def advise(a: argparse.Namespace) -> tuple[str, int]:
    """``labkit advise``: (text or JSON, exit status)."""
    from labkit.advisor.report import advice_json, advice_text
    from labkit.advisor.search import advise as search

    cfg = advise_from.apply(a)
    a.engine_config = cfg
    shape = _shape(a)
    advise_from.chunks(a, cfg, shape.layers)
    if a.batch is None:
        raise LabkitError("batch must be given: --batch N (the global batch, in sequences)")
    batch = parse_int("batch", a.batch)
    seq = parse_int("seq", a.seq) if a.seq is not None else shape.seq
    if seq != shape.seq:
        shape = replace(shape, seq=seq)
    top = parse_int("top", a.top, positive=False)
    if top < 0:
        raise LabkitError(f"top must be a non-negative integer (got {a.top!r})")
    fixed = _layout(a, shape, batch)
    gpus = _gpus(a, fixed)
    per_node = parse_int("gpus_per_node", a.gpus_per_node) if a.gpus_per_node is not None else None
    ports = parse_int("network_ports", a.network_ports) if a.network_ports is not None else None
    tokens = parse_int("tokens", a.tokens) if a.tokens is not None else None
    overrides = {field: getattr(a, flag.replace("-", "_")) for flag, field in assumptions.FLAGS.items()
                 if getattr(a, flag.replace("-", "_"), None) is not None}
    framework = require_choice("framework", DEFAULT_FRAMEWORK if a.framework is None else a.framework,
                               FRAMEWORKS)
    adv = search(shape, batch, a.gpu, gpus, a.goal, seq=seq, gpus_per_node=per_node, host=a.host,
                 headroom=_headroom(a.headroom), fixed=fixed, framework=framework, network=a.network,
                 network_ports=ports, calibration=_calibration(a.calibration), overrides=overrides)
    fits = adv.exact.feasible if adv.exact is not None else bool(adv.kept)
    written = advise_from.export(a, adv, shape, batch, seq, assumptions.apply(profile(framework), overrides)) \
        if getattr(a, "export", None) else None
    if a.json:
        doc = advice_json(adv, top, tokens)
        if cfg is not None:
            doc["engine_config"] = {"engine": cfg.engine, "path": cfg.path, "read": list(cfg.read),
                                    "ignored": list(cfg.ignored), "notes": list(cfg.notes)}
        doc["exported"] = written
        return json.dumps(doc, indent=2), 0 if fits else 1
    out = "\n".join(([cfg.summary(), ""] if cfg is not None else []) + [advice_text(adv, top, tokens)]
                    + ([written] if written else []))
    return out, 0 if fits else 1


def register(sub: argparse._SubParsersAction) -> None:
    adv = sub.add_parser("advise", help="price a layout, or rank the parallel and memory plans of a model")
    add_shape_flags(adv)
    adv.add_argument("--kv-heads", dest="kv_heads", help="key/value heads of grouped-query attention (custom shape)")
    adv.add_argument("--gpu", default="A100-80GB", help="a GPU of the catalogue (default A100-80GB)")
    adv.add_argument("--gpus", help="GPU count (default: dp x tp x pp x cp when dp, tp, pp are given, else 8 x cp)")
    adv.add_argument("--host", help="a host of the catalogue (default: the first built with the GPU)")
    adv.add_argument("--gpus-per-node", dest="gpus_per_node", help="GPUs per host (default: the host's slots)")
    adv.add_argument("--batch", help="global batch, in sequences")
    adv.add_argument("--goal", default="fastest", help="fit, fastest, cheapest, greenest")
    adv.add_argument("--headroom", default="0.1", help="share of GPU memory kept free (default 0.1, i.e. 10%%)")
    for flag, what in (("dp", "data-parallel GPUs"), ("tp", "tensor-parallel GPUs (divides the heads)"),
                       ("pp", "pipeline stages (divides the layers)"),
                       ("cp", "context-parallel GPUs sharing each sequence (Megatron-Core's ring attention; fused "
                        "attention; the sequence splits into 2 x cp chunks; searched from 8,192 positions)"),
                       ("micro-batch", "sequences per micro-batch"),
                       ("chunks", "model chunks per GPU, v, of the interleaved schedule"),
                       ("first-stage-layers", "layers on the first pipeline stage (with --pp; Megatron's "
                        "--decoder-first-pipeline-num-layers)"),
                       ("last-stage-layers", "layers on the last pipeline stage (with --pp)")):
        adv.add_argument(f"--{flag}", dest=flag.replace("-", "_"), help=what)
    adv.add_argument("--zero", help="ZeRO stage: 0, 1, 2, 3")
    adv.add_argument("--recompute", help="none, selective, full, op (torchtitan's op-level selective)")
    adv.add_argument("--schedule", help="pipeline schedule: 1f1b, gpipe, interleaved")
    adv.add_argument("--offload", help="none, dram (ZeRO-Offload), nvme (ZeRO-Infinity)")
    adv.add_argument("--precision", help="bf16-mixed, fp32 (GEMMs at TF32 where the GPU has it), fp8 (GEMMs at the "
                     "FP8 peak, the rest in bf16, bf16-mixed states)")
    adv.add_argument("--sp", help="sequence parallelism with tp > 1: on, off (default: the framework's; "
                     "megatron-2021 off)")
    adv.add_argument("--attention", help="fused (FlashAttention/sdpa; also flash, sdpa), explicit (s x s scores in "
                     "memory; also eager); default: the framework's (megatron-2021 explicit, else fused)")
    for flag, (field, (_, what)) in zip(assumptions.FLAGS, assumptions.OVERRIDES.items(), strict=True):
        kind = assumptions.KIND.get(field, "on, off")
        adv.add_argument(f"--{flag}", dest=flag.replace("-", "_"), help=f"{what}: {kind} (default: the framework's)")
    adv.add_argument("--framework", help=", ".join(FRAMEWORKS) + " (default "
                     f"{DEFAULT_FRAMEWORK}, what runs today): the kernels and overlaps every plan is priced with; "
                     "the plan lists each assumption and the flag that overrides it")
    adv.add_argument("--network", help="the link between hosts (default: the host's): ib-hdr, ib-ndr, roce-400, "
                     "ethernet-100, omnipath-100, or any catalogue link between hosts")
    adv.add_argument("--network-ports", dest="network_ports", help="network ports per host (default: the host's)")
    adv.add_argument("--tokens", help="a whole training run: tokens to train on -> days, GPU-hours, USD, energy")
    adv.add_argument("--calibration", help="a calibration file measured on your GPU (labkit.hardware.calibration)")
    adv.add_argument("--top", default="5", help="plans to show (default 5)")
    adv.add_argument("--json", action="store_true", help="print the plans as JSON (bytes, seconds, USD, J, kg)")
    advise_from.add_flags(adv)
    add_finetune_flags(adv)  # --finetune: the cheapest single card or the fewest GPUs for a LoRA/QLoRA run
    adv.set_defaults(run=run)


def run(a: argparse.Namespace) -> int:
    if getattr(a, "finetune", None) is not None:
        return advise_finetune(a)
    out, status = advise(a)
    print(out)
    return status
