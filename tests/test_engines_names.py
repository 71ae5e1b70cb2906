"""Every key and flag ``labkit advise --export`` writes is one the engine reads, as its own source names them.

Checked against (each read from the engine's repository, not installed: none installs beside the lab's torch):

* torchtitan, ``torchtitan/config/job_config.py`` at pytorch/torchtitan 238fa99 (the last TOML config system, Feb
  2026): ``[model]`` name, flavor, converters; ``[training]`` local_batch_size, global_batch_size, seq_len,
  mixed_precision_param; ``[parallelism]`` data_parallel_replicate_degree, data_parallel_shard_degree,
  fsdp_reshard_after_forward (default, always, never), tensor_parallel_degree, pipeline_parallel_degree,
  context_parallel_degree, pipeline_parallel_schedule, pipeline_parallel_microbatch_size,
  pipeline_parallel_layers_per_stage, pipeline_parallel_first_stage_less_layers,
  pipeline_parallel_last_stage_less_layers; ``[activation_checkpoint]`` mode (selective, full, memory_budget,
  none), selective_ac_option. The converter ``quantize.linear.float8``: ``register_model_converter`` in
  ``torchtitan/components/quantization/float8.py``. Schedule names: torch's own
  ``torch.distributed.pipelining.schedules.get_schedule_class`` (checked live below).
* Megatron-LM, ``megatron/training/arguments.py`` at NVIDIA/Megatron-LM 1e42279 (June 2025): the flags of
  ``MEGATRON`` below, each an ``add_argument`` there; ``--recompute-granularity`` (full, selective),
  ``--recompute-method`` (uniform, block), ``--fp8-format`` (e4m3, hybrid), ``--normalization`` (LayerNorm,
  RMSNorm), ``--position-embedding-type`` (learned_absolute, rope, ...), ``--attention-backend`` (AttnBackend:
  flash, fused, unfused, local, auto).
* DeepSpeed, deepspeedai/DeepSpeed edaa722 (Aug 2026): ``deepspeed/runtime/constants.py`` (train_batch_size,
  train_micro_batch_size_per_gpu, gradient_accumulation_steps, bf16, zero_optimization),
  ``deepspeed/runtime/zero/config.py`` (stage, overlap_comm, offload_optimizer, offload_param, alias
  stage3_max_reuse_distance), ``deepspeed/runtime/zero/offload_config.py`` (device: none, cpu, nvme; nvme_path),
  ``deepspeed/runtime/precision_config.py`` (enabled), ``deepspeed/runtime/activation_checkpointing/config.py``
  (activation_checkpointing: partition_activations, contiguous_memory_optimization, cpu_checkpointing).

Checked once more outside the suite (Dec 2026; the engines' sources from their repositories, not installed): 22
exported ds_configs (llm-foundry's 11 rows, Table 2's 6, five plans) built by DeepSpeed's own ``DeepSpeedConfig``
(edaa722, with its unused cpuinfo/hjson/einops/msgpack imports stubbed): batch sizes, accumulation, stage, offload
devices and overlap_comm read back as written; 7 exported job TOMLs (torchtitan's 3 H100 rows and four plans) built
into torchtitan's ``JobConfig`` dataclasses (238fa99), which refuse an unknown key; 15 exported argument lists
(Table 1's 10 rows, OPT-175B, four plans) read against every ``add_argument`` of Megatron's arguments.py (1e42279,
parsed with ast): each flag defined, switches given no value, 254 values within their type and choices.

Cost: a dozen exports of a few plans and one torch import (about 3 s).
"""

from __future__ import annotations

import json
import shlex
import tomllib

import pytest

from labkit.advisor.engines import ExportPlan, render
from labkit.advisor.layout import Layout
from labkit.predict.profiles import PROFILES
from labkit.shapes import model_shape

TORCHTITAN = {
    "model": {"name", "flavor", "converters"},
    "training": {"local_batch_size", "global_batch_size", "seq_len", "mixed_precision_param"},
    "parallelism": {"data_parallel_replicate_degree", "data_parallel_shard_degree", "fsdp_reshard_after_forward",
                    "tensor_parallel_degree", "pipeline_parallel_degree", "context_parallel_degree",
                    "pipeline_parallel_schedule", "pipeline_parallel_microbatch_size",
                    "pipeline_parallel_layers_per_stage", "pipeline_parallel_first_stage_less_layers",
                    "pipeline_parallel_last_stage_less_layers"},
    "activation_checkpoint": {"mode", "selective_ac_option"},
}
MEGATRON = {"--tensor-model-parallel-size", "--pipeline-model-parallel-size", "--context-parallel-size",
            "--sequence-parallel", "--num-layers-per-virtual-pipeline-stage", "--decoder-first-pipeline-num-layers",
            "--decoder-last-pipeline-num-layers", "--micro-batch-size", "--global-batch-size",
            "--recompute-granularity", "--recompute-method", "--recompute-num-layers", "--use-distributed-optimizer",
            "--use-torch-fsdp2", "--overlap-grad-reduce", "--overlap-param-gather", "--tp-comm-overlap",
            "--no-gradient-accumulation-fusion", "--bf16", "--fp8-format", "--attention-backend", "--num-layers",
            "--hidden-size", "--num-attention-heads", "--seq-length", "--max-position-embeddings", "--vocab-size",
            "--ffn-hidden-size", "--group-query-attention", "--num-query-groups", "--swiglu", "--normalization",
            "--untie-embeddings-and-output-weights", "--position-embedding-type", "--disable-bias-linear",
            "--add-qkv-bias", "--attention-dropout", "--hidden-dropout"}
MEGATRON_CHOICES = {"--recompute-granularity": {"full", "selective"}, "--recompute-method": {"uniform", "block"},
                    "--fp8-format": {"e4m3", "hybrid"}, "--normalization": {"LayerNorm", "RMSNorm"},
                    "--position-embedding-type": {"learned_absolute", "rope"},
                    "--attention-backend": {"flash", "fused", "unfused", "local", "auto"}}
DEEPSPEED = {"train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "bf16",
             "zero_optimization", "activation_checkpointing"}
DEEPSPEED_ZERO = {"stage", "overlap_comm", "offload_optimizer", "offload_param", "stage3_max_reuse_distance"}
DEEPSPEED_INNER = {"bf16": {"enabled"}, "offload_optimizer": {"device", "nvme_path"},
                   "offload_param": {"device", "nvme_path"},
                   "activation_checkpointing": {"partition_activations", "contiguous_memory_optimization",
                                                "cpu_checkpointing"}}

LLAMA = model_shape("llama3-8b")
PLANS = {
    "torchtitan": [Layout(8, 1, 1, 2, 3, "op"), Layout(4, 2, 2, 1, 3, "full", schedule="interleaved", chunks=2,
                                                      precision="fp8"), Layout(16, 1, 1, 1, 0, "none"),
                   Layout(4, 1, 4, 1, 2, "full", schedule="gpipe")],
    "megatron": [Layout(2, 4, 2, 1, 1, "selective", schedule="interleaved", chunks=4), Layout(8, 2, 1, 1, 3, "full"),
                 Layout(4, 2, 2, 1, 0, "full", first_stage_layers=14, last_stage_layers=18, precision="fp8"),
                 Layout(2, 2, 1, 1, 1, "none", cp=4, sp=False)],
    "deepspeed": [Layout(16, 1, 1, 2, 3, "full"), Layout(16, 1, 1, 4, 2, "none", offload="dram"),
                  Layout(16, 1, 1, 1, 3, "full", offload="nvme", precision="fp32")],
}


def _text(engine: str, lay: Layout, framework: str = "megatron-te") -> str:
    return render(engine, ExportPlan(LLAMA, lay, 64, 8192, 8, PROFILES[framework]))


@pytest.mark.parametrize("lay", PLANS["torchtitan"], ids=lambda lay: lay.label)
def test_torchtitan_jobs_use_job_config_keys(lay):
    from torch.distributed.pipelining.schedules import get_schedule_class

    data = tomllib.loads(_text("torchtitan", lay))
    assert set(data) <= set(TORCHTITAN)
    for section, keys in data.items():
        assert set(keys) <= TORCHTITAN[section], section
    par = data["parallelism"]
    assert par.get("fsdp_reshard_after_forward", "default") in ("default", "always", "never")
    assert data["activation_checkpoint"]["mode"] in ("selective", "full", "memory_budget", "none")
    assert data["model"].get("converters", ["quantize.linear.float8"]) == ["quantize.linear.float8"]
    if "pipeline_parallel_schedule" in par:
        assert get_schedule_class(par["pipeline_parallel_schedule"]) is not None  # torch knows the name
    world = (par["data_parallel_replicate_degree"] * par["data_parallel_shard_degree"] * par["tensor_parallel_degree"]
             * par["pipeline_parallel_degree"] * par["context_parallel_degree"])
    assert world == lay.gpus


@pytest.mark.parametrize("lay", PLANS["megatron"], ids=lambda lay: lay.label)
def test_megatron_arguments_use_arguments_py_flags(lay):
    words = shlex.split(_text("megatron", lay).replace("\\\n", " "), comments=True)
    assert words[:1] == ["torchrun"] and "pretrain_gpt.py" in words
    args = words[words.index("pretrain_gpt.py") + 1:]
    flags = [w for w in args if w.startswith("--")]
    assert set(flags) <= MEGATRON
    for flag, allowed in MEGATRON_CHOICES.items():
        if flag in args:
            assert args[args.index(flag) + 1] in allowed, flag


@pytest.mark.parametrize("lay", PLANS["deepspeed"], ids=lambda lay: lay.label)
def test_ds_configs_use_deepspeed_keys(lay):
    data = json.loads(_text("deepspeed", lay, "fsdp"))
    assert set(data) <= DEEPSPEED
    zero = data["zero_optimization"]
    assert set(zero) <= DEEPSPEED_ZERO
    for key, inner in DEEPSPEED_INNER.items():
        table = zero.get(key, data.get(key, {}))
        assert set(table) <= inner, key
        assert table.get("device", "none") in ("none", "cpu", "nvme")
    assert data["train_batch_size"] == (data["train_micro_batch_size_per_gpu"] * data["gradient_accumulation_steps"]
                                        * lay.dp)
