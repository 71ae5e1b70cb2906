"""Reading real, messy engine configs: older torchtitan files, ``-1`` degrees, launchers, ignored and contradictory
keys, every refusal naming its key and the allowed values; the torchtitan presets' shapes; ``labkit advise``'s
one-line errors. Cost: pure parsing plus a few in-process ``labkit advise`` calls (about 2 s)."""

from __future__ import annotations

import json

import pytest

from labkit.advisor import engines
from labkit.advisor.engines.presets import llama_ffn, torchtitan_shape
from labkit.cli import build_parser
from labkit.cli.advise import advise
from labkit.errors import LabkitError
from labkit.shapes import model_shape

OLD_TORCHTITAN = """
[job]
dump_folder = "./outputs"
[profiling]
enable_profiling = true
[model]
name = "llama3"
flavor = "8B"
norm_type = "rmsnorm"
[training]
batch_size = 2
seq_len = 8192
data_parallel_replicate_degree = 1
data_parallel_shard_degree = -1
tensor_parallel_degree = 1
compile = true
dataset = "c4"
[experimental]
context_parallel_degree = 1
pipeline_parallel_degree = 1
[activation_checkpoint]
mode = 'selective'
selective_ac_option = 'op'
[float8]
enable_float8_linear = true
"""


def _file(tmp_path, name: str, text: str):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_an_older_torchtitan_file_reads_its_keys_and_lists_the_rest(tmp_path):
    cfg = engines.read(_file(tmp_path, "old.toml", OLD_TORCHTITAN), gpus=8)
    assert {k: cfg.layout[k] for k in ("dp", "tp", "pp", "micro_batch", "zero", "recompute", "precision", "batch",
                                       "seq")} == {"dp": "8", "tp": "1", "pp": "1", "micro_batch": "2", "zero": "3",
                                                   "recompute": "op", "precision": "fp8", "batch": "16", "seq": "8192"}
    assert cfg.shape == model_shape("llama3-8b")
    assert {"[job]", "[profiling]", "training.dataset", "model.norm_type"} <= set(cfg.ignored)
    assert any("compile" in n for n in cfg.notes)
    assert "training.batch_size" in cfg.read and "experimental.pipeline_parallel_degree" in cfg.read


@pytest.mark.parametrize(("old", "edit", "words"), [
    ("batch_size = 2", "batch_size = 2\nlocal_batch_size = 4", "local_batch_size must agree"),
    ("[float8]", "[parallelism]\ntensor_parallel_degree = 2\n[float8]", "tensor_parallel_degree must be given once"),
    ("batch_size = 2", "batch_size = 2\nmixed_precision_param = 'float16'", "mixed_precision_param must be one of"),
    ("batch_size = 2", "batch_size = 2\nenable_cpu_offload = true", "enable_cpu_offload must be false"),
])
def test_torchtitan_contradictions_and_unpriced_values_are_refused(tmp_path, old, edit, words):
    with pytest.raises(LabkitError, match=words):
        engines.read(_file(tmp_path, "bad.toml", OLD_TORCHTITAN.replace(old, edit)), gpus=8)


def test_torchtitan_defaults_need_the_world_size_and_refuse_every_other_layer(tmp_path):
    with pytest.raises(LabkitError, match="gpus must be given: data_parallel_shard_degree = -1"):
        engines.read(_file(tmp_path, "a.toml", OLD_TORCHTITAN))
    text = OLD_TORCHTITAN.replace("selective_ac_option = 'op'", "selective_ac_option = '2'")
    with pytest.raises(LabkitError, match="selective_ac_option op or 1"):
        engines.read(_file(tmp_path, "b.toml", text), gpus=8)


def test_hsdp_and_pipelines_say_what_they_approximate(tmp_path):
    text = """[model]\nflavor = "70B"\n[training]\nlocal_batch_size = 8\nglobal_batch_size = 64\nseq_len = 4096
[parallelism]\ndata_parallel_replicate_degree = 2\ndata_parallel_shard_degree = 2\npipeline_parallel_degree = 4
pipeline_parallel_schedule = "Interleaved1F1B"\npipeline_parallel_layers_per_stage = 7
pipeline_parallel_last_stage_less_layers = 3
[activation_checkpoint]\nmode = "full"\n"""
    cfg = engines.read(_file(tmp_path, "h.toml", text))
    assert cfg.layout["zero"] == "2"  # FSDP2's default does not reshard after the forward under pipelining
    assert cfg.chunks(80, 4) == 3  # torchtitan counts the embedding and output: (80 + 1 + 3) / (4 x 7)
    assert any("HSDP" in n for n in cfg.notes) and any("fewer layers" in n for n in cfg.notes)


def test_torchtitan_flavors_are_labkit_presets_or_their_own_shapes():
    assert llama_ffn(4096, 1.3, 1024) == 14336 and llama_ffn(8192, 1.3, 4096) == 28672
    assert torchtitan_shape("llama3", "8B", 8192) == model_shape("llama3-8b")
    big = torchtitan_shape("llama3", "405B", 8192)
    assert (big.layers, big.hidden, big.ffn, big.kv_heads) == (126, 16384, 53248, 8)
    with pytest.raises(LabkitError, match="model.flavor must be one of debugmodel, 8B, 70B, 405B"):
        torchtitan_shape("llama3", "13B", 4096)


MEGATRON = """# a Megatron-LM launch, as its examples write it
torchrun --nnodes 2 --nproc_per_node 8 pretrain_gpt.py \\
    --tensor-model-parallel-size 4 --pipeline-model-parallel-size 2 --sequence-parallel \\
    --num-layers 32 --hidden-size 4096 --num-attention-heads 32 --seq-length 4096 \\
    --micro-batch-size 1 --global-batch-size 128 --use-distributed-optimizer --overlap-grad-reduce \\
    --recompute-granularity full --recompute-method uniform --recompute-num-layers 1 --bf16 \\
    --lr 3e-4 --data-path /data/x --log-interval 10
"""


def test_a_megatron_launch_reads_the_world_size_and_lists_the_rest(tmp_path):
    cfg = engines.read(_file(tmp_path, "m.sh", MEGATRON))
    assert {k: cfg.layout[k] for k in ("dp", "tp", "pp", "gpus", "zero", "recompute", "sp", "batch")} == {
        "dp": "2", "tp": "4", "pp": "2", "gpus": "16", "zero": "1", "recompute": "full", "sp": "on", "batch": "128"}
    assert cfg.overrides["overlap_grad_reduce"] == "on" and cfg.overrides["overlap_param_gather"] == "off"
    assert set(cfg.ignored) == {"--lr", "--data-path", "--log-interval"}
    assert cfg.shape is None and cfg.shape_fields["layers"] == 32  # no vocabulary: --vocab completes it


@pytest.mark.parametrize(("edit", "words"), [
    ("--bf16", "--bf16 --fp16", ), ("--recompute-method uniform", "--recompute-method block"),
    ("--micro-batch-size 1", "--micro-batch-size 1 --micro-batch-size 2"),
    ("--use-distributed-optimizer", "--use-distributed-optimizer --use-torch-fsdp2"),
])
def test_megatron_contradictions_are_refused(tmp_path, edit, words):
    with pytest.raises(LabkitError):
        engines.read(_file(tmp_path, "m.sh", MEGATRON.replace(edit, words)))


def test_ds_configs_read_offload_and_check_their_batch(tmp_path):
    ds = {"train_batch_size": 64, "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 4,
          "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}, "reduce_bucket_size": 5e8},
          "bf16": {"enabled": True}, "optimizer": {"type": "AdamW"}}
    cfg = engines.read(_file(tmp_path, "a.json", json.dumps(ds)))
    assert (cfg.layout["dp"], cfg.layout["offload"], cfg.layout["zero"]) == ("8", "dram", "2")
    assert {"optimizer", "zero_optimization.reduce_bucket_size"} <= set(cfg.ignored)
    for bad, words in ((ds | {"train_batch_size": 63}, "train_batch_size must be"),
                       (ds | {"zero_optimization": {"stage": 3, "offload_param": {"device": "cpu"}}}, "offload must"),
                       (ds | {"zero_optimization": {"stage": 4}}, "zero_optimization.stage must be one of 0, 1, 2, 3")):
        with pytest.raises(LabkitError, match=words):
            engines.read(_file(tmp_path, "b.json", json.dumps(bad)))


def test_files_are_bounded_and_must_be_their_format(tmp_path):
    with pytest.raises(LabkitError, match="under 1,048,576 bytes"):
        engines.read(_file(tmp_path, "big.toml", "#" * (engines.MAX_BYTES + 1)))
    with pytest.raises(LabkitError, match="not valid JSON"):
        engines.read(_file(tmp_path, "x.json", "{"))
    with pytest.raises(LabkitError, match="from must name a .toml"):
        engines.read(_file(tmp_path, "x.yaml", ""))


def _advise(*argv: str) -> str:
    return advise(build_parser().parse_args(["advise", *argv]))[0]


def test_the_command_line_refuses_a_second_value_and_a_degree_that_cannot_divide(tmp_path):
    path = _file(tmp_path, "m.sh", MEGATRON)
    with pytest.raises(LabkitError, match="tp must be given once: .* says 4, the command line 2"):
        _advise("--from", str(path), "--tp", "2", "--vocab", "128256")
    with pytest.raises(LabkitError, match="vocab must be given"):
        _advise("--from", str(path))
    assert "ignored (no bearing on the plan): --lr, --data-path, --log-interval" in _advise(
        "--from", str(path), "--vocab", "128256", "--gpu", "H100-SXM")
    one_line = r"^tp must divide the 8 GPUs \(the default.*\): one of 1, 2, 4, 8 \(got 3\)$"
    with pytest.raises(LabkitError, match=one_line):
        _advise("--model", "gpt3-175b", "--batch", "8", "--tp", "3")
