"""LoRA and QLoRA steps measured on real peft models beside ``labkit.predict.finetune``: every category to the byte."""

import json
import warnings

import pytest

from labkit.cli import main
from labkit.measure.finetune import compare_finetune
from labkit.predict.finetune import Finetune, parse_targets
from labkit.shapes.hf_models import small_spec

pytest.importorskip("peft")
warnings.filterwarnings("ignore", category=FutureWarning)

# (family, precision, method, targets, gradient checkpointing): every family, both precisions, both methods,
# checkpointing on and off; vocab 512 so that the loss's gradients set the peak, as in a real model
CASES = [
    ("gpt2", "fp32", "lora", None, False),
    ("gpt2", "bf16-mixed", "qlora", "o,down", True),
    ("llama", "fp32", "lora", "all-linear", True),
    ("llama", "bf16-mixed", "qlora", None, False),
    ("mistral", "bf16-mixed", "lora", "k,o,up", False),
    ("mistral", "fp32", "lora", "down", False),
    ("qwen2", "bf16-mixed", "lora", "all-linear", True),
    ("qwen2", "fp32", "lora", "v,gate", False),
]


@pytest.mark.parametrize(("family", "precision", "method", "targets", "ckpt"), CASES)
def test_every_category_to_the_byte(family, precision, method, targets, ckpt):
    spec = small_spec(family, layers=2, vocab=512)
    ft = Finetune(method, 4, parse_targets(targets, spec.shape.gated), double_quant=family == "llama",
                  checkpointing=ckpt)
    r = compare_finetune(spec, ft, 2, 16, precision)
    for name, (measured, predicted) in r.categories.items():
        assert measured == predicted, name
    assert [m for m, _ in r.layers] == [p for _, p in r.layers]
    assert r.outside[0] == r.outside[1]
    assert r.peak["phase"] == r.peak["predicted_phase"]
    assert r.peak["measured"] == pytest.approx(r.peak["predicted"], rel=0.03)


def test_first_layer_keeps_less_without_checkpointing():
    """Nothing before the first adapter needs a gradient: the first layer's first norm is not kept."""
    spec = small_spec("llama", layers=2, vocab=512)
    r = compare_finetune(spec, Finetune("lora", 4, ("q", "v")), 2, 16, "fp32")
    (first, _), (second, _) = r.layers
    assert second - first == 4 * 2 * 16 * 64 + 4 * 2 * 16  # RMSNorm's fp32 input and rstd
    assert r.categories["adapter gradients"][0] < r.categories["frozen base weights"][0] / 10


def test_qlora_base_is_smaller_than_lora_base():
    spec = small_spec("llama", layers=2, vocab=512)
    lora = compare_finetune(spec, Finetune("lora", 4, ("q", "v")), 2, 16, "bf16-mixed")
    qlora = compare_finetune(spec, Finetune("qlora", 4, ("q", "v")), 2, 16, "bf16-mixed")
    assert qlora.categories["frozen base weights"][0] < lora.categories["frozen base weights"][0]
    assert qlora.categories["activations"] == lora.categories["activations"]
    assert "NF4" in qlora.setup["base storage"] and "bitsandbytes not used" in qlora.setup["base storage"]


def test_measure_cli_finetune_json(capsys, tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(small_spec("qwen2", hidden=64, ffn=128, vocab=512).config))
    assert main(["measure", "--hf-config", str(path), "--batch", "2", "--seq", "16", "--precision", "bf16-mixed",
                 "--finetune", "qlora", "--lora-rank", "8", "--double-quant", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["setup"]["finetune"] == "qlora" and out["setup"]["lora_rank"] == 8
    assert all(m == p for m, p in out["categories"].values())
    assert abs(out["peak"]["predicted"] / out["peak"]["measured"] - 1) < 0.03


BAD = [
    (["--finetune", "lora", "--lora-rank", "0"], "lora_rank must be a whole number of at least 1"),
    (["--finetune", "lora", "--lora-rank", "65"], "lora_rank must be at most 32"),
    (["--finetune", "lora", "--lora-targets", "q,w"], "lora_targets must be names from q, k, v, o, gate, up, down"),
    (["--finetune", "qlora"], "precision must be bf16-mixed with finetune qlora"),
    (["--finetune", "dora"], "finetune must be one of lora, qlora"),
    (["--finetune", "lora", "--dropout", "0.1"], "dropout must stay at sdpa attention"),
]


@pytest.mark.parametrize(("extra", "message"), BAD)
def test_bad_input_is_one_line(capsys, tmp_path, extra, message):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(small_spec("llama", hidden=64, kv_heads=2, vocab=128).config))
    assert main(["measure", "--hf-config", str(path), "--seq", "16", *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1
