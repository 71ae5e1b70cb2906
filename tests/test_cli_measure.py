"""``labkit measure`` and ``labkit estimate --hf-config``: real steps beside predictions, one-line errors, exit 2."""

import json

import pytest

from labkit.cli import main
from labkit.shapes.hf_config import shipped_configs
from labkit.shapes.hf_models import small_spec


@pytest.fixture
def small_llama(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(small_spec("llama", hidden=32, ffn=64, vocab=64).config))
    return str(path)


def test_measure_a_config_file_as_json(capsys, small_llama):
    assert main(["measure", "--hf-config", small_llama, "--batch", "2", "--seq", "16", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    for name, (measured, predicted) in out["categories"].items():
        assert measured == pytest.approx(predicted, rel=0.02), name
    assert len(out["layers"]) == 2 and all(m == p for m, p in out["layers"])
    assert out["peak"]["measured"] == pytest.approx(out["peak"]["predicted"], rel=0.03)
    assert out["peak"]["phase"] == out["peak"]["predicted_phase"]
    assert out["setup"]["blocks"] == "model.layers"


def test_measure_the_tiny_gpt_as_text(capsys):
    assert main(["measure", "--seq", "16", "--precision", "bf16-mixed"]) == 0
    text = capsys.readouterr().out
    assert "tiny-gpt" in text and "whole-step peak" in text and "activations, layer 1" in text


BAD = [
    (["--batch", "0"], "batch must be a positive integer"),
    (["--precision", "fp8"], "precision must be one of fp32, bf16-autocast, bf16-mixed"),
    (["--attention", "flashy"], "attention must be one of fused (also: flash, sdpa), explicit (also: eager)"),
    (["--dropout", "x"], "dropout must be a number in [0, 1)"),
    (["--hf-config", "/no/such/config.json"], "hf_config '/no/such/config.json' cannot be read"),
    (["--layers", "2"], "layers applies to a --hf-config model"),
]


@pytest.mark.parametrize(("argv", "message"), BAD, ids=[" ".join(a) for a, _ in BAD])
def test_bad_input_is_one_line_and_exit_2(capsys, argv, message):
    assert main(["measure", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("labkit: error: ") and message in err


@pytest.mark.parametrize("cmd", ["measure", "estimate"])
def test_unsupported_or_malformed_config_names_field_and_families(capsys, tmp_path, cmd):
    bad = tmp_path / "config.json"
    bad.write_text(json.dumps({"model_type": "bert", "hidden_size": 768}))
    assert main([cmd, "--hf-config", str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "model_type must be one of gpt2, llama, mistral, qwen2 (got 'bert')" in err
    bad.write_text(json.dumps({"model_type": "llama", "hidden_size": 64}))
    assert main([cmd, "--hf-config", str(bad)]) == 2
    assert "num_attention_heads" in capsys.readouterr().err


def test_estimate_reads_a_shipped_config(capsys):
    assert main(["estimate", "--hf-config", "mistral-7b", "--seq", "4096", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["params"] == 7_241_732_096 and out["model"] == "mistral-7b"
    assert main(["estimate", "--hf-config", str(shipped_configs()["gpt2"]), "--model", "gpt2"]) == 2
    assert "hf_config must be given alone" in capsys.readouterr().err
