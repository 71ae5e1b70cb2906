"""torchtitan's job TOML, read and written.

Key names are those of ``torchtitan/config/job_config.py`` at pytorch/torchtitan 238fa99 (Feb 2026, the last
commit before #2386 moved torchtitan from TOML to Python configs): ``[parallelism]``
``data_parallel_replicate_degree``, ``data_parallel_shard_degree`` (-1: the GPUs left after the others),
``fsdp_reshard_after_forward``, ``tensor_parallel_degree``, ``pipeline_parallel_degree``,
``pipeline_parallel_schedule``, ``pipeline_parallel_microbatch_size``, ``pipeline_parallel_layers_per_stage``,
``pipeline_parallel_first_stage_less_layers``, ``pipeline_parallel_last_stage_less_layers``,
``context_parallel_degree``, ``expert_parallel_degree``; ``[training]`` ``local_batch_size``,
``global_batch_size`` (-1: local x data-parallel degree, as ``torchtitan/train.py`` computes it), ``seq_len``,
``mixed_precision_param``, ``enable_cpu_offload``; ``[activation_checkpoint]`` ``mode``, ``selective_ac_option``;
``[model]`` ``name``, ``flavor``, ``converters`` (``quantize.linear.float8``, registered in
``components/quantization/float8.py``); ``[compile]`` ``enable``. Older files (``torchtitan/config_manager.py``
at 9dec370, Dec 2024, the commit of the H100 benchmarks) put the degrees and ``batch_size``, ``compile`` under
``[training]``, pipeline and context degrees, ``pipeline_parallel_microbatches`` under ``[experimental]`` and
float8 under ``[float8] enable_float8_linear``: both are read. FSDP2 is ZeRO-3 when it reshards after the
forward (``always``, or ``default`` without pipelining: torchtitan's ``parallelize`` rule) and ZeRO-2 when it does
not; replication alone is DDP (ZeRO-0).
"""

from __future__ import annotations

import tomllib

from labkit.advisor.engines.config import EngineConfig, ExportPlan, flag, whole
from labkit.advisor.engines.presets import torchtitan_flavor, torchtitan_shape
from labkit.errors import LabkitError, require_choice

SCHEDULES = {"1F1B": "1f1b", "GPipe": "gpipe", "Interleaved1F1B": "interleaved"}
RESHARD = ("default", "always", "never")
READ_SECTIONS = ("parallelism", "training", "activation_checkpoint", "model", "compile", "experimental", "float8",
                 "quantize")
FLOAT8 = ("float8", "quantize.linear.float8")  # converter names (old and 238fa99)


class _Keys:
    """Keys looked up across the sections a key has lived in, each recorded as read; a key in two sections with
    two values is a contradiction."""

    def __init__(self, data: dict, path: str) -> None:
        self.data, self.path, self.read = data, path, []
        for name, value in data.items():
            if not isinstance(value, dict):
                raise LabkitError(f"{name} must be a [table] of a torchtitan job config (got {value!r} in {path})")

    def get(self, key: str, sections: tuple[str, ...], default: object = None) -> object:
        found = {s: self.data[s][key] for s in sections if key in self.data.get(s, {})}
        if len(set(map(repr, found.values()))) > 1:
            raise LabkitError(f"{key} must be given once: {', '.join(f'{s}.{key} = {v!r}' for s, v in found.items())}")
        if found:
            self.read.append(f"{next(iter(found))}.{key}")
            return next(iter(found.values()))
        return default

    def ignored(self) -> list[str]:
        done = set(self.read)
        out = [f"[{s}]" for s in self.data if s not in READ_SECTIONS]
        for s in READ_SECTIONS:
            out += [key for key in _flat(self.data.get(s, {}), s) if key not in done]
        return out


def _flat(table: dict, prefix: str) -> list[str]:
    out = []
    for key, value in table.items():
        out += _flat(value, f"{prefix}.{key}") if isinstance(value, dict) else [f"{prefix}.{key}"]
    return out


def parse(text: str, path: str, gpus: int | None) -> EngineConfig:
    """A torchtitan job TOML (module text) as ``labkit advise``'s layout."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise LabkitError(f"from file {path!r} is not valid TOML: {err}") from None
    k, notes = _Keys(data, path), []
    par, old, exp = ("parallelism",), ("parallelism", "training"), ("parallelism", "experimental")
    rep = whole("data_parallel_replicate_degree", k.get("data_parallel_replicate_degree", old, 1))
    shard = k.get("data_parallel_shard_degree", old, -1)
    tp = whole("tensor_parallel_degree", k.get("tensor_parallel_degree", old, 1))
    pp = whole("pipeline_parallel_degree", k.get("pipeline_parallel_degree", exp, 1))
    cp = whole("context_parallel_degree", k.get("context_parallel_degree", exp, 1))
    if k.get("expert_parallel_degree", par, 1) != 1:
        raise LabkitError("expert_parallel_degree must be 1: labkit prices dense models (got "
                          f"{data['parallelism']['expert_parallel_degree']!r})")
    if shard == -1:
        if gpus is None:
            raise LabkitError("gpus must be given: data_parallel_shard_degree = -1 takes the GPUs left after the "
                              "other degrees (the launcher's world size): --gpus N")
        rest = rep * tp * pp * cp
        if gpus % rest:
            raise LabkitError(f"gpus must be a multiple of data_parallel_replicate_degree x tensor x pipeline x "
                              f"context degrees = {rest} for data_parallel_shard_degree = -1 (got {gpus})")
        shard = gpus // rest
    shard = whole("data_parallel_shard_degree", shard)
    dp = rep * shard
    reshard = require_choice("fsdp_reshard_after_forward", k.get("fsdp_reshard_after_forward", par, "default"),
                             RESHARD)
    if shard == 1:
        zero = 0
    else:
        zero = 3 if reshard == "always" or (reshard == "default" and pp == 1) else 2
        if rep > 1:
            notes.append(f"HSDP (replicate {rep} x shard {shard}) priced as ZeRO-{zero} over all {dp} data-parallel "
                         "ranks: labkit shards over the whole group")
    sched_name = k.get("pipeline_parallel_schedule", exp, "1F1B")
    schedule = SCHEDULES.get(sched_name) if isinstance(sched_name, str) else None
    if schedule is None:
        raise LabkitError(f"pipeline_parallel_schedule must be one of {', '.join(SCHEDULES)} (got {sched_name!r})")
    local = _local_batch(k)
    glob = k.get("global_batch_size", ("training",), -1)
    batch = local * dp if glob == -1 else whole("global_batch_size", glob)
    if batch % (local * dp):
        raise LabkitError(f"global_batch_size must be a multiple of local_batch_size x data-parallel degree = "
                          f"{local} x {dp} (got {batch})")
    layout = {"dp": dp, "tp": tp, "pp": pp, "cp": cp, "zero": zero, "batch": batch, "sp": "on",
              "attention": "fused"}
    virtual = None
    if pp > 1:
        layout["schedule"] = schedule
        layout["micro_batch"] = _pp_micro(k, local)
        less = (whole("pipeline_parallel_first_stage_less_layers",
                      k.get("pipeline_parallel_first_stage_less_layers", par, 1), low=0),
                whole("pipeline_parallel_last_stage_less_layers",
                      k.get("pipeline_parallel_last_stage_less_layers", par, 1), low=0))
        per_stage = k.get("pipeline_parallel_layers_per_stage", par)
        if schedule == "interleaved":
            if per_stage is None:
                layout["chunks"] = 2  # pipeline_parallel.py: a multi-stage schedule defaults to 2 stages per rank
            else:
                virtual = (whole("pipeline_parallel_layers_per_stage", per_stage), sum(less))
        if any(less):
            notes.append(f"torchtitan gives the first and last stage {less[0]} and {less[1]} fewer layers "
                         "(pipeline_parallel_first/last_stage_less_layers, for the embedding and output); labkit "
                         "splits the layers evenly")
    else:
        layout["micro_batch"] = local
    seq = k.get("seq_len", ("training",), 2048)
    layout["seq"] = whole("seq_len", seq)
    layout["precision"] = _precision(k)
    layout["recompute"] = _recompute(k)
    if flag(k.get("enable_cpu_offload", ("training",), False), "enable_cpu_offload"):
        raise LabkitError("enable_cpu_offload must be false: FSDP's CPU offload of every state is not an offload "
                          "labkit prices (ZeRO-Offload's optimizer on the host, ZeRO-Infinity's NVMe): --offload dram")
    if k.get("compile", ("training",)) is not None or k.get("enable", ("compile",)) is not None:
        notes.append("compile read, not priced: the kernels are the framework profile's (--framework)")
    shape = None
    name, flavor = k.get("name", ("model",)), k.get("flavor", ("model",))
    if flavor is not None:
        shape = torchtitan_shape(str(name or "llama3"), str(flavor), layout["seq"])
    out = {key: str(v) for key, v in layout.items()}
    return EngineConfig("torchtitan", path, out, framework="fsdp", shape=shape, read=tuple(k.read),
                        ignored=tuple(k.ignored()), notes=tuple(notes), virtual_stage_layers=virtual)


def _local_batch(k: _Keys) -> int:
    new, old = k.get("local_batch_size", ("training",)), k.get("batch_size", ("training",))
    if new is not None and old is not None and new != old:
        raise LabkitError(f"local_batch_size must agree with the older batch_size (got {new!r} and {old!r})")
    return whole("local_batch_size", new if new is not None else old if old is not None else 8)


def _pp_micro(k: _Keys, local: int) -> int:
    size, count = k.get("pipeline_parallel_microbatch_size", ("parallelism",)), \
        k.get("pipeline_parallel_microbatches", ("experimental",))
    if size is not None:
        return whole("pipeline_parallel_microbatch_size", size)
    if count is not None:
        n = whole("pipeline_parallel_microbatches", count)
        if local % n:
            raise LabkitError(f"pipeline_parallel_microbatches must divide local_batch_size {local} (got {n})")
        return local // n
    return 1


def _precision(k: _Keys) -> str:
    param = k.get("mixed_precision_param", ("training",), "bfloat16")
    prec = {"bfloat16": "bf16-mixed", "float32": "fp32"}.get(param)
    if prec is None:
        raise LabkitError(f"mixed_precision_param must be one of bfloat16, float32 (got {param!r})")
    converters = k.get("converters", ("model",), [])
    if not isinstance(converters, list):
        raise LabkitError(f"converters must be a list of names (got {converters!r})")
    old = flag(k.get("enable_float8_linear", ("float8",), False), "enable_float8_linear")
    if old or any(c in FLOAT8 for c in converters):
        return "fp8"
    other = [c for c in converters if c not in FLOAT8]
    if other:
        raise LabkitError(f"converters must be {' or '.join(FLOAT8)} or none: labkit prices float8 linears only "
                          f"(got {other})")
    return prec


def _recompute(k: _Keys) -> str:
    mode = k.get("mode", ("activation_checkpoint",), "selective")
    option = str(k.get("selective_ac_option", ("activation_checkpoint",), "2"))
    if mode in ("none", "full"):
        return str(mode)
    if mode == "selective" and option == "op":
        return "op"
    if mode == "selective" and option == "1":
        return "full"  # every layer checkpointed
    raise LabkitError(f"activation_checkpoint must be mode none, full, or selective with selective_ac_option op or 1 "
                      f"(every layer): labkit does not price every n-th layer or a memory budget (got mode {mode!r}, "
                      f"selective_ac_option {option!r}; torchtitan's default is selective, 2)")


def render(plan: ExportPlan) -> str:
    """``plan`` as a torchtitan job TOML of 238fa99's keys (module text)."""
    lay, shape = plan.layout, plan.shape
    name, flavor = torchtitan_flavor(shape)
    problems = {"zero_stage": (lay.zero_stage == 1, "0, 2 or 3 (DDP, FSDP2 without or with resharding)"),
                "offload": (lay.offload != "none", "none"),
                "recompute": (lay.recompute == "selective", "none, full or op"),
                "sp": (lay.tp > 1 and not lay.sp, "on with tp > 1 (torchtitan's tensor parallel is sequence-parallel)"),
                "attention": (lay.attention != "fused", "fused (torchtitan runs SDPA)"),
                "first_stage_layers": (lay.uneven, "an even split")}
    for key, (bad, allowed) in problems.items():
        if bad:
            raise LabkitError(f"{key} must be {allowed} to be written as a torchtitan job (got {getattr(lay, key)!r})")
    per_rank = plan.batch // lay.dp
    lines = ["# torchtitan job config written by labkit advise --export torchtitan: the keys of torchtitan's",
             "# TOML configs (torchtitan/config/job_config.py at 238fa99; torchtitan since #2386 takes Python configs)",
             f"# plan: {lay.label}; {lay.gpus} GPUs: the launcher's world size (NGPU)", "",
             "[model]", f'name = "{name}"', f'flavor = "{flavor}"']
    if lay.precision == "fp8":
        lines.append('converters = ["quantize.linear.float8"]')
    lines += ["", "[training]", f"local_batch_size = {lay.micro_batch if lay.pp == 1 else per_rank}",
              f"global_batch_size = {plan.batch}", f"seq_len = {plan.seq}",
              f'mixed_precision_param = "{"float32" if lay.precision == "fp32" else "bfloat16"}"', "",
              "[parallelism]", f"data_parallel_replicate_degree = {1 if lay.zero_stage else lay.dp}",
              f"data_parallel_shard_degree = {lay.dp if lay.zero_stage else 1}"]
    if lay.zero_stage:
        lines.append(f'fsdp_reshard_after_forward = "{"always" if lay.zero_stage == 3 else "never"}"')
    lines += [f"tensor_parallel_degree = {lay.tp}", f"pipeline_parallel_degree = {lay.pp}",
              f"context_parallel_degree = {lay.cp}"]
    if lay.pp > 1:
        sched = {v: k for k, v in SCHEDULES.items()}[lay.schedule]
        lines += [f'pipeline_parallel_schedule = "{sched}"', f"pipeline_parallel_microbatch_size = {lay.micro_batch}",
                  "pipeline_parallel_first_stage_less_layers = 0", "pipeline_parallel_last_stage_less_layers = 0"]
        if lay.schedule == "interleaved":
            lines.append(f"pipeline_parallel_layers_per_stage = {shape.layers // (lay.pp * lay.chunks)}")
    mode = {"none": "none", "full": "full", "op": "selective"}[lay.recompute]
    lines += ["", "[activation_checkpoint]", f'mode = "{mode}"']
    if mode == "selective":
        lines.append('selective_ac_option = "op"')
    return "\n".join(lines) + "\n"
