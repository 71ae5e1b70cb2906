"""Megatron-LM's argument list, read and written.

Flag names are those of ``megatron/training/arguments.py`` at NVIDIA/Megatron-LM 1e42279 (June 2025), the last
layout where every flag below is one ``add_argument`` (since #2896, Jan 2026, many are generated from
``TransformerConfig`` under the same names). A file is the arguments of ``pretrain_gpt.py``, one or many per line,
``#`` comments and ``\\`` continuations allowed, optionally behind ``torchrun --nnodes N --nproc-per-node P
pretrain_gpt.py`` (the launcher's world size: Megatron derives data parallelism as the GPUs left after tensor,
pipeline and context parallelism). It is split with ``shlex``; nothing in it is run. Megatron's defaults hold
where a flag is absent: no sequence parallelism, no overlap, ZeRO-0, fp32, micro-batch 1. The distributed
optimizer (``--use-distributed-optimizer``) shards the optimizer states (ZeRO-1, the Megatron-Core documentation's
description); ``--use-torch-fsdp2`` is FSDP2 (ZeRO-3).
"""

from __future__ import annotations

import shlex

from labkit.advisor.engines.config import EngineConfig, ExportPlan, whole
from labkit.errors import LabkitError
from labkit.shapes import ModelShape

INTS = ("tensor-model-parallel-size", "pipeline-model-parallel-size", "context-parallel-size",
        "num-layers-per-virtual-pipeline-stage", "num-virtual-stages-per-pipeline-rank",
        "decoder-first-pipeline-num-layers", "decoder-last-pipeline-num-layers", "micro-batch-size",
        "global-batch-size", "num-layers", "hidden-size", "num-attention-heads", "seq-length", "ffn-hidden-size",
        "num-query-groups", "vocab-size", "max-position-embeddings", "recompute-num-layers")
SWITCHES = ("sequence-parallel", "use-distributed-optimizer", "overlap-grad-reduce", "overlap-param-gather",
            "tp-comm-overlap", "bf16", "fp16", "group-query-attention", "swiglu", "untie-embeddings-and-output-weights",
            "disable-bias-linear", "use-flash-attn", "no-gradient-accumulation-fusion", "use-torch-fsdp2",
            "recompute-activations", "add-qkv-bias")
CHOICES = {"recompute-granularity": ("full", "selective"), "recompute-method": ("uniform", "block"),
           "fp8-format": ("e4m3", "hybrid"), "normalization": ("LayerNorm", "RMSNorm"),
           "position-embedding-type": ("learned_absolute", "rope", "mrope", "relative", "none"),
           "attention-backend": ("flash", "fused", "unfused", "local", "auto")}
FLOATS = ("attention-dropout", "hidden-dropout")
ATTENTION = {"flash": "fused", "fused": "fused", "auto": "fused", "unfused": "explicit", "local": "explicit"}
LAUNCHERS = ("torchrun", "python", "python3")


def _tokens(text: str, path: str) -> list[str]:
    try:
        return shlex.split(text.replace("\\\n", " "), comments=True)
    except ValueError as err:
        raise LabkitError(f"from file {path!r} is not an argument list: {err}") from None


def _launcher(tokens: list[str]) -> tuple[list[str], int | None, list[str]]:
    """(Megatron's arguments, the launcher's world size or None, the launcher's words read)."""
    if not tokens or tokens[0].rsplit("/", 1)[-1] not in LAUNCHERS:
        return tokens, None, []
    script = next((i for i, t in enumerate(tokens) if t.endswith(".py")), None)
    if script is None:
        raise LabkitError("from file starts with a launcher but names no .py script (pretrain_gpt.py)")
    opts = _pairs(tokens[1:script])
    nodes, per = opts.get("nnodes", "1"), opts.get("nproc-per-node", opts.get("nproc_per_node"))
    if per is None:
        return tokens[script + 1:], None, [f"launcher: {tokens[0]}"]
    try:
        world = int(str(nodes)) * int(str(per))
    except ValueError:
        raise LabkitError(f"nnodes and nproc-per-node must be whole numbers to give the world size (got {nodes!r}, "
                          f"{per!r})") from None
    return tokens[script + 1:], world, [f"launcher: --nnodes {nodes} --nproc-per-node {per}"]


def _pairs(tokens: list[str]) -> dict[str, object]:
    """``--name value`` / ``--name=value`` / ``--switch`` as {name: value or True}; a flag given twice with two
    values contradicts itself."""
    out: dict[str, object] = {}
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        if not tok.startswith("-"):
            raise LabkitError(f"arguments must be --flag [value] pairs (got {tok!r} after {tokens[i - 1]!r})"
                              if i else f"arguments must start with a --flag (got {tok!r})")
        name, eq, value = tok.lstrip("-").partition("=")
        if not eq:
            nxt = tokens[i + 1] if i + 1 < len(tokens) else None
            takes = name not in SWITCHES and nxt is not None and not nxt.startswith("--")
            value, i = (nxt, i + 1) if takes else (True, i)
        if name in out and out[name] != value:
            raise LabkitError(f"{name} must be given once (got {out[name]!r} and {value!r})")
        out[name] = value
        i += 1
    return out


def _typed(args: dict[str, object]) -> dict[str, object]:
    out: dict[str, object] = {}
    for name, value in args.items():
        if name in INTS:
            try:
                out[name] = whole(name, int(str(value)))
            except ValueError:
                raise LabkitError(f"{name} must be a whole number (got {value!r})") from None
        elif name in SWITCHES:
            if value is not True:
                raise LabkitError(f"{name} is a switch and takes no value (got {value!r})")
            out[name] = True
        elif name in CHOICES:
            if value not in CHOICES[name]:
                raise LabkitError(f"{name} must be one of {', '.join(CHOICES[name])} (got {value!r})")
            out[name] = value
        elif name in FLOATS:
            try:
                out[name] = float(str(value))
            except ValueError:
                raise LabkitError(f"{name} must be a number (got {value!r})") from None
    return out


def parse(text: str, path: str, gpus: int | None) -> EngineConfig:
    """A Megatron-LM argument list (module text) as ``labkit advise``'s layout."""
    tokens, world, launched = _launcher(_tokens(text, path))
    raw = _pairs(tokens)
    a = _typed(raw)
    if world is not None and gpus is not None and world != gpus:
        raise LabkitError(f"gpus must equal the launcher's world size {world} (got --gpus {gpus})")
    world = world or gpus
    if world is None:
        raise LabkitError("gpus must be given: Megatron takes the world size from its launcher (torchrun "
                          "--nnodes --nproc-per-node in the file, or --gpus N)")
    tp, pp = a.get("tensor-model-parallel-size", 1), a.get("pipeline-model-parallel-size", 1)
    cp = a.get("context-parallel-size", 1)
    if world % (tp * pp * cp):
        raise LabkitError(f"gpus must be a multiple of tensor x pipeline x context parallel sizes = {tp * pp * cp} "
                          f"(got {world})")
    dp = world // (tp * pp * cp)
    micro = a.get("micro-batch-size", 1)
    notes: list[str] = []
    lay = {"dp": dp, "tp": tp, "pp": pp, "cp": cp, "micro_batch": micro, "gpus": world,
           "batch": a.get("global-batch-size", micro * dp), "sp": "on" if a.get("sequence-parallel") else "off",
           "zero": _zero(a), "recompute": _recompute(a), "precision": _precision(a, notes)}
    virtual = None
    if pp > 1:
        lay["schedule"] = "1f1b"
        if "num-layers-per-virtual-pipeline-stage" in a and "num-virtual-stages-per-pipeline-rank" in a:
            raise LabkitError("num-layers-per-virtual-pipeline-stage and num-virtual-stages-per-pipeline-rank must "
                              "not both be given")
        if "num-virtual-stages-per-pipeline-rank" in a:
            lay["schedule"], lay["chunks"] = "interleaved", a["num-virtual-stages-per-pipeline-rank"]
        elif "num-layers-per-virtual-pipeline-stage" in a:
            lay["schedule"], virtual = "interleaved", (a["num-layers-per-virtual-pipeline-stage"], 0)
    for flag, key in (("decoder-first-pipeline-num-layers", "first_stage_layers"),
                      ("decoder-last-pipeline-num-layers", "last_stage_layers")):
        if flag in a:
            lay[key] = a[flag]
    backend = "fused" if a.get("use-flash-attn") else ATTENTION.get(str(a.get("attention-backend")))
    if backend is not None:
        lay["attention"] = backend
    if "seq-length" in a:
        lay["seq"] = a["seq-length"]
    over = {"overlap_grad_reduce": "on" if a.get("overlap-grad-reduce") else "off",
            "grad_accum_fusion": "off" if a.get("no-gradient-accumulation-fusion") else "on"}
    if lay["zero"] >= 1:
        over["overlap_param_gather"] = "on" if a.get("overlap-param-gather") else "off"
    if tp > 1:
        over["tp_comm_overlap"] = "on" if a.get("tp-comm-overlap") else "off"
    fields, shape = _shape(a)
    read = launched + [f"--{n}" for n in raw if n in a]
    ignored = [f"--{n}" for n in raw if n not in a]
    return EngineConfig("megatron", path, {k: str(v) for k, v in lay.items()}, over, "megatron-te", shape, fields,
                        tuple(read), tuple(ignored), tuple(notes), virtual)


def _zero(a: dict) -> int:
    if a.get("use-torch-fsdp2") and a.get("use-distributed-optimizer"):
        raise LabkitError("use-torch-fsdp2 and use-distributed-optimizer must not both be given: FSDP2 shards "
                          "everything (ZeRO-3), the distributed optimizer the optimizer states (ZeRO-1)")
    return 3 if a.get("use-torch-fsdp2") else 1 if a.get("use-distributed-optimizer") else 0


def _recompute(a: dict) -> str:
    gran = a.get("recompute-granularity", "selective" if a.get("recompute-activations") else None)
    if gran is None:
        return "none"
    if gran == "selective":
        return "selective"
    if a.get("recompute-method", "uniform") != "uniform" or a.get("recompute-num-layers", 1) != 1:
        raise LabkitError(f"recompute-method must be uniform with recompute-num-layers 1 (every layer recomputed): "
                          f"labkit does not price recomputing some layers (got {a.get('recompute-method')!r}, "
                          f"{a.get('recompute-num-layers')!r})")
    return "full"


def _precision(a: dict, notes: list[str]) -> str:
    if a.get("bf16") and a.get("fp16"):
        raise LabkitError("bf16 and fp16 must not both be given")
    if "fp8-format" in a:
        return "fp8"
    if a.get("fp16"):
        notes.append("fp16 priced as bf16-mixed: the same bytes held and moved")
    return "bf16-mixed" if a.get("bf16") or a.get("fp16") else "fp32"


def _shape(a: dict) -> tuple[dict, ModelShape | None]:
    need = ("num-layers", "hidden-size", "num-attention-heads")
    if not any(n in a for n in need):
        return {}, None
    missing = [f"--{n}" for n in need if n not in a]
    if missing:
        raise LabkitError(f"the model needs --num-layers --hidden-size --num-attention-heads together (missing "
                          f"{', '.join(missing)})")
    pos = a.get("position-embedding-type", "learned_absolute")
    fields = {"layers": a["num-layers"], "hidden": a["hidden-size"], "heads": a["num-attention-heads"],
              "ffn": a.get("ffn-hidden-size", 0), "gated": bool(a.get("swiglu")),
              "kv_heads": a.get("num-query-groups", 0) if a.get("group-query-attention") else 0,
              "norm": "rmsnorm" if a.get("normalization") == "RMSNorm" else "layernorm",
              "tied": not a.get("untie-embeddings-and-output-weights"), "learned_pos": pos == "learned_absolute",
              "bias": not a.get("disable-bias-linear"), "qkv_bias": bool(a.get("add-qkv-bias")),
              "dropout": a.get("attention-dropout", 0.1) > 0 or a.get("hidden-dropout", 0.1) > 0}
    if fields["ffn"] == 4 * fields["hidden"]:
        fields["ffn"] = 0
    if "seq-length" in a:
        fields["seq"] = a["seq-length"]
    if "vocab-size" in a:
        fields["vocab"] = a["vocab-size"]
    if "seq" in fields and "vocab" in fields:
        return fields, ModelShape("megatron-model", **fields, source="Megatron-LM arguments")
    return fields, None


def render(plan: ExportPlan) -> str:
    """``plan`` as Megatron-LM arguments behind a torchrun line (module text)."""
    lay, s, prof = plan.layout, plan.shape, plan.profile
    problems = {"zero_stage": (lay.zero_stage == 2, "0, 1 (--use-distributed-optimizer) or 3 (--use-torch-fsdp2)"),
                "offload": (lay.offload != "none", "none"), "recompute": (lay.recompute == "op",
                                                                        "none, selective or full"),
                "schedule": (lay.pp > 1 and lay.schedule == "gpipe", "1f1b or interleaved")}
    for key, (bad, allowed) in problems.items():
        if bad:
            raise LabkitError(f"{key} must be {allowed} to be written as Megatron-LM arguments (got "
                              f"{getattr(lay, key)!r})")
    per = plan.gpus_per_node if lay.gpus % plan.gpus_per_node == 0 else lay.gpus
    args = [f"--tensor-model-parallel-size {lay.tp}", f"--pipeline-model-parallel-size {lay.pp}",
            f"--context-parallel-size {lay.cp}", f"--micro-batch-size {lay.micro_batch}",
            f"--global-batch-size {plan.batch}"]
    args += ["--sequence-parallel"] if lay.tp > 1 and lay.sp else []
    if lay.pp > 1 and lay.schedule == "interleaved":
        args.append(f"--num-layers-per-virtual-pipeline-stage {s.layers // (lay.pp * lay.chunks)}")
    args += [f"--decoder-first-pipeline-num-layers {n}" for n in [lay.first_stage_layers] if n]
    args += [f"--decoder-last-pipeline-num-layers {n}" for n in [lay.last_stage_layers] if n]
    full = "--recompute-granularity full --recompute-method uniform --recompute-num-layers 1"
    args += {"none": [], "selective": ["--recompute-granularity selective"], "full": [full]}[lay.recompute]
    args += {0: [], 1: ["--use-distributed-optimizer"], 3: ["--use-torch-fsdp2"]}[lay.zero_stage]
    args += ["--overlap-grad-reduce"] if prof.overlap_dp else []
    args += ["--overlap-param-gather"] if lay.zero_stage >= 1 and prof.overlap_sharded else []
    args += ["--tp-comm-overlap"] if lay.tp > 1 and prof.overlap_tp else []
    args += ["--no-gradient-accumulation-fusion"] if prof.grad_accum_bytes else []
    args += {"fp32": [], "bf16-mixed": ["--bf16"], "fp8": ["--bf16 --fp8-format hybrid"]}[lay.precision]
    args.append(f"--attention-backend {'flash' if lay.attention == 'fused' else 'unfused'}")
    args += [f"--num-layers {s.layers}", f"--hidden-size {s.hidden}", f"--num-attention-heads {s.heads}",
             f"--seq-length {plan.seq}", f"--max-position-embeddings {max(plan.seq, s.seq)}",
             f"--vocab-size {s.vocab}"]
    args += [f"--ffn-hidden-size {s.ffn}"] if s.ffn else []
    args += [f"--group-query-attention --num-query-groups {s.kv_heads}"] if s.kv_heads else []
    args += ["--swiglu"] if s.gated else []
    args += ["--normalization RMSNorm"] if s.norm == "rmsnorm" else []
    args += ["--untie-embeddings-and-output-weights"] if not s.tied else []
    args += ["--position-embedding-type rope"] if not s.learned_pos else []
    args += ["--disable-bias-linear"] if not s.bias else []
    args += ["--add-qkv-bias"] if s.qkv_bias else []
    args += ["--attention-dropout 0 --hidden-dropout 0"] if not s.dropout else []
    head = ["# Megatron-LM arguments written by labkit advise --export megatron (flag names of",
            "# megatron/training/arguments.py, NVIDIA/Megatron-LM 1e42279); --vocab-size is the NullTokenizer's:",
            "# with a real tokenizer, give its files instead (Megatron pads its vocabulary)",
            f"# plan: {lay.label}",
            f"torchrun --nnodes {lay.gpus // per} --nproc-per-node {per} pretrain_gpt.py \\"]
    return "\n".join(head + [f"    {x} \\" for x in args[:-1]] + [f"    {args[-1]}"]) + "\n"
