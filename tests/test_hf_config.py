"""Shapes from transformers-style config files: parameter counts equal transformers' own, bad files named."""

import json

import pytest

from labkit.errors import LabkitError
from labkit.shapes.hf_config import FAMILIES, from_config, shape_from_hf_config, shipped_configs
from labkit.shapes.hf_models import build_model, count_parameters

PUBLISHED = {  # parameter counts the model cards and papers print, for the shipped files
    "gpt2": 124_439_808, "llama-2-7b": 6_738_415_616, "llama-2-70b": 68_976_648_192,
    "mistral-7b": 7_241_732_096, "qwen2-0.5b": 494_032_768, "tinyllama-1.1b": 1_100_048_384,
}


def test_at_least_six_shipped_configs_each_with_a_source():
    files = shipped_configs()
    assert len(files) >= 6
    for path in files.values():
        source = json.loads(path.read_text())["_source"]
        assert source.startswith("https://huggingface.co/") or source.startswith("https://arxiv.org/"), path


@pytest.mark.parametrize("name", sorted(shipped_configs()))
def test_parameter_count_equals_transformers_on_the_meta_device(name):
    spec = from_config(shipped_configs()[name])
    assert spec.shape.params == count_parameters(build_model(spec, device="meta"))
    if name in PUBLISHED:
        assert spec.shape.params == PUBLISHED[name]


def test_family_traits():
    llama2_70b, qwen = (from_config(shipped_configs()[n]) for n in ("llama-2-70b", "qwen2-0.5b"))
    assert llama2_70b.shape.kv_heads == 8 and llama2_70b.shape.gated and llama2_70b.shape.norm == "rmsnorm"
    assert not llama2_70b.shape.tied and qwen.shape.tied and qwen.shape.qkv_bias
    gpt2 = from_config(shipped_configs()["gpt2"])
    assert gpt2.activation == "gelu_new" and gpt2.shape.learned_pos and gpt2.shape.dropout
    assert shape_from_hf_config("llama-2-7b").params == PUBLISHED["llama-2-7b"]


@pytest.mark.parametrize("cfg, field", [
    ({"model_type": "bert"}, "model_type"),
    ({"model_type": "llama", "hidden_size": 64}, "num_attention_heads"),
    ({"model_type": "gpt2", "n_embd": "wide", "n_layer": 2, "n_head": 2, "vocab_size": 10, "n_positions": 8},
     "n_embd"),
    ({"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 2, "vocab_size": 9,
      "max_position_embeddings": 8, "intermediate_size": 32, "hidden_act": "relu"}, "hidden_act"),
])
def test_bad_configs_name_the_field(cfg, field):
    with pytest.raises(LabkitError, match=field) as err:
        from_config(cfg)
    if field == "model_type":
        assert all(f in str(err.value) for f in FAMILIES)


def test_unreadable_and_malformed_files_name_themselves(tmp_path):
    bad = tmp_path / "config.json"
    bad.write_text("{not json")
    with pytest.raises(LabkitError, match="not valid JSON"):
        from_config(bad)
    with pytest.raises(LabkitError, match="cannot be read"):
        from_config(tmp_path / "missing.json")
