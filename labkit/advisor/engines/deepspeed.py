"""DeepSpeed's ``ds_config.json``, read and written.

Key names are those of deepspeedai/DeepSpeed edaa722 (Aug 2026): ``deepspeed/runtime/constants.py``
(``train_batch_size``, ``train_micro_batch_size_per_gpu``, ``gradient_accumulation_steps``, ``bf16``, ``fp16``,
``zero_optimization``), ``deepspeed/runtime/zero/config.py`` (``stage``, ``overlap_comm``, ``offload_param``,
``offload_optimizer``, the ``stage3_prefetch_bucket_size`` and ``stage3_max_reuse_distance`` aliases),
``deepspeed/runtime/zero/offload_config.py`` (``device``: ``none``, ``cpu``, ``nvme``),
``deepspeed/runtime/precision_config.py`` (``enabled``) and
``deepspeed/runtime/activation_checkpointing/config.py`` (``activation_checkpointing``). DeepSpeed checks
``train_batch_size = micro x accumulation x data-parallel size`` and the same here: the data-parallel degree
follows from the batch keys, or from ``--gpus`` (over ``--tp``/``--pp``, which a ds_config does not hold: tensor
and pipeline parallelism live in the model code). Whether a layer is recomputed is the model code's call too:
an ``activation_checkpointing`` section (deepspeed.checkpointing, which Megatron-DeepSpeed calls per layer) is
read as full recompute, its absence leaves ``--recompute`` to the command line. ``overlap_comm`` defaults on for
stage 3 and off below (its validator in ``zero/config.py``). Priced under the ``fsdp`` profile unless
``--framework`` says otherwise: today's ZeRO-3 prefetches its gathers as FSDP does; ``deepspeed-2021`` is 2021's code.
"""

from __future__ import annotations

import json

from labkit.advisor.engines.config import EngineConfig, ExportPlan, flag, whole
from labkit.errors import LabkitError, require_choice

BATCH = ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps")
DEVICES = ("none", "cpu", "nvme")


def _load(text: str, path: str) -> dict:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise LabkitError(f"from file {path!r} is not valid JSON: {err}") from None
    if not isinstance(data, dict):
        raise LabkitError(f"from file {path!r} must hold a JSON object (a ds_config)")
    return data


def _table(data: dict, key: str) -> dict:
    value = data.get(key, {})
    if not isinstance(value, dict):
        raise LabkitError(f"{key} must be a JSON object (got {value!r})")
    return value


def parse(text: str, path: str, gpus: int | None) -> EngineConfig:
    """A DeepSpeed ds_config (module text) as ``labkit advise``'s layout."""
    data = _load(text, path)
    read, notes = [], []
    tbs, micro, gas = (data.get(k) for k in BATCH)
    micro = whole("train_micro_batch_size_per_gpu", micro) if micro is not None else None
    gas = whole("gradient_accumulation_steps", gas) if gas is not None else None
    tbs = whole("train_batch_size", tbs) if tbs is not None else None
    read += [k for k in BATCH if k in data]
    lay: dict[str, object] = {}
    if tbs is not None and micro is not None:
        gas_ = gas or 1
        if tbs % (micro * gas_):
            raise LabkitError(f"train_batch_size must be train_micro_batch_size_per_gpu x gradient_accumulation_steps "
                              f"x data-parallel size (got {tbs} with {micro} x {gas_})")
        lay |= {"dp": tbs // (micro * gas_), "batch": tbs, "micro_batch": micro}
    elif micro is not None:
        lay["micro_batch"] = micro
        if gpus is None:
            raise LabkitError("gpus must be given: this ds_config has no train_batch_size, so the data-parallel size "
                              "is the launcher's (--gpus N)")
        lay["gpus"] = gpus
        lay["batch_per_dp"] = micro * (gas or 1)  # the CLI multiplies by dp once tp and pp are known
    else:
        raise LabkitError("train_micro_batch_size_per_gpu must be given (DeepSpeed's micro-batch per GPU)")
    zero = _table(data, "zero_optimization")
    stage = require_choice("zero_optimization.stage", zero.get("stage", 0), (0, 1, 2, 3))
    read += [f"zero_optimization.{k}" for k in ("stage", "overlap_comm", "offload_optimizer", "offload_param",
                                               "stage3_prefetch_bucket_size", "stage3_max_reuse_distance")
             if k in zero]
    lay["zero"] = stage
    lay["offload"] = _offload(zero, stage)
    over: dict[str, str] = {}
    overlap = flag(zero.get("overlap_comm", stage == 3), "zero_optimization.overlap_comm")
    if stage:  # stage 0 is DeepSpeed's plain data parallelism: overlap_comm has no say
        over["overlap_param_gather" if stage == 3 else "overlap_grad_reduce"] = "on" if overlap else "off"
    if stage == 3 and zero.get("stage3_prefetch_bucket_size", 1) == 0:
        over["overlap_param_gather"] = "off"
        notes.append("stage3_prefetch_bucket_size 0: nothing prefetched, every gather exposed")
    if stage == 3 and "stage3_max_reuse_distance" in zero:
        over["reuse_distance"] = str(float(zero["stage3_max_reuse_distance"]))
    bf16, fp16 = (flag(_table(data, k).get("enabled", False), f"{k}.enabled") for k in ("bf16", "fp16"))
    read += [f"{k}.enabled" for k in ("bf16", "fp16") if "enabled" in _table(data, k)]
    if bf16 and fp16:
        raise LabkitError("bf16.enabled and fp16.enabled must not both be true")
    if fp16:
        notes.append("fp16 priced as bf16-mixed: the same bytes held and moved")
    lay["precision"] = "bf16-mixed" if bf16 or fp16 else "fp32"
    if "activation_checkpointing" in data:
        _table(data, "activation_checkpointing")
        lay["recompute"] = "full"
        read.append("activation_checkpointing")
        notes.append("activation_checkpointing read as full recompute: the model code checkpoints each layer "
                     "through deepspeed.checkpointing")
    known = set(BATCH) | {"zero_optimization", "bf16", "fp16", "activation_checkpointing"}
    ignored = [k for k in data if k not in known]
    ignored += [f"zero_optimization.{k}" for k in zero if f"zero_optimization.{k}" not in read]
    return EngineConfig("deepspeed", path, {k: str(v) for k, v in lay.items()}, over, "fsdp", read=tuple(read),
                        ignored=tuple(ignored), notes=tuple(notes))


def _offload(zero: dict, stage: int) -> str:
    dev = {}
    for key in ("offload_optimizer", "offload_param"):
        table = zero.get(key) or {}
        if not isinstance(table, dict):
            raise LabkitError(f"zero_optimization.{key} must be a JSON object (got {table!r})")
        dev[key] = require_choice(f"zero_optimization.{key}.device", table.get("device", "none"), DEVICES)
    pair = (dev["offload_optimizer"], dev["offload_param"])
    if pair == ("none", "none"):
        return "none"
    if pair == ("cpu", "none") and stage in (2, 3):
        return "dram"  # ZeRO-Offload (stage 2), DeepSpeed's offload_optimizer on stage 3
    if pair == ("nvme", "nvme") and stage == 3:
        return "nvme"  # ZeRO-Infinity
    raise LabkitError(f"zero_optimization offload must be offload_optimizer cpu (stage 2 or 3) or offload_optimizer "
                      f"and offload_param nvme (stage 3): what labkit prices (got optimizer {pair[0]}, param "
                      f"{pair[1]} at stage {stage})")


def render(plan: ExportPlan) -> str:
    """``plan`` as a ds_config (module text)."""
    lay, prof = plan.layout, plan.profile
    problems = {"tp": (lay.tp > 1, "1: a ds_config holds no tensor-parallel degree (set it in the model code)"),
                "pp": (lay.pp > 1, "1: a ds_config holds no pipeline degree (DeepSpeed's PipelineModule)"),
                "cp": (lay.cp > 1, "1"), "recompute": (lay.recompute not in ("none", "full"), "none or full"),
                "precision": (lay.precision == "fp8", "bf16-mixed or fp32 (FP8 is Transformer Engine's)")}
    for key, (bad, allowed) in problems.items():
        if bad:
            raise LabkitError(f"{key} must be {allowed} to be written as a ds_config (got {getattr(lay, key)!r})")
    steps = plan.batch // (lay.dp * lay.micro_batch)
    zero: dict[str, object] = {"stage": lay.zero_stage}
    if lay.zero_stage:
        zero["overlap_comm"] = bool(prof.overlap_sharded if lay.zero_stage == 3 else prof.overlap_dp)
    if lay.zero_stage == 3 and prof.reuse_distance != float("inf"):
        zero["stage3_max_reuse_distance"] = int(prof.reuse_distance)
    if lay.offload == "dram":
        zero["offload_optimizer"] = {"device": "cpu"}
    elif lay.offload == "nvme":
        zero["offload_optimizer"] = {"device": "nvme", "nvme_path": "/local_nvme"}
        zero["offload_param"] = {"device": "nvme", "nvme_path": "/local_nvme"}
    out: dict[str, object] = {"train_batch_size": plan.batch, "train_micro_batch_size_per_gpu": lay.micro_batch,
                              "gradient_accumulation_steps": steps, "zero_optimization": zero,
                              "bf16": {"enabled": lay.precision == "bf16-mixed"}}
    if lay.recompute == "full":
        out["activation_checkpointing"] = {"partition_activations": False, "contiguous_memory_optimization": False,
                                           "cpu_checkpointing": False}
    return json.dumps(out, indent=2) + "\n"
