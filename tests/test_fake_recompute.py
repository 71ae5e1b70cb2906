"""Full training under full recompute at full widths (``labkit measure --full --recompute full``), beside
``labkit.predict.recompute_peak``: each layer keeps its input only, the rotary tables leave the activations,
GPT-2's positional causal mask arrives once, and the backward's worst moment holds one rebuilt layer.

Cost: about 8 s on 2 cores, one process (a few layers at real widths; the 80-layer 70B run is in the report).
"""

from __future__ import annotations

import json

import pytest

from labkit.cli import main
from labkit.measure.fake_build import load
from labkit.measure.fake_full import measure_full
from labkit.shapes.hf_config import from_config


def _exact(report):
    for name, (m, p) in report.categories.items():
        assert p is not None and m == p, name


def test_llama_widths_full_recompute_backward_moment_is_the_rebuilt_layer():
    """A small vocabulary puts the backward's worst moment inside the layers, where the rebuilt layer is alive."""
    spec = load("llama-2-7b", 2)
    spec = from_config(spec.config | {"vocab_size": 512, "_source": spec.source}, name="llama-2-7b widths, vocab 512")
    r = measure_full(spec, 1, 2048, "fp32", progress=lambda s: None, recompute="full")
    _exact(r)
    assert [m for m, _ in r.layers] == [4 * 2048 * 4096] * 2  # each layer's input, fp32
    measured, predicted = r.peak["by_phase"]["measured"], r.peak["by_phase"]["predicted"]
    assert measured["backward"] == pytest.approx(predicted["backward"], rel=1e-3)
    assert measured["forward"] == pytest.approx(predicted["forward"], abs=1024)  # inside the last layer's MLP
    assert r.peak["measured"] == pytest.approx(r.peak["predicted"], rel=1e-3)
    assert r.setup["recompute"] == "full"


def test_gpt2_eager_mask_is_saved_once_and_recompute_drops_activations():
    none = measure_full("gpt2", 2, 256, "bf16-mixed", "eager", layers=2, progress=lambda s: None)
    full = measure_full("gpt2", 2, 256, "bf16-mixed", "eager", layers=2, progress=lambda s: None, recompute="full")
    _exact(none)
    _exact(full)
    assert full.recorded.memory.outside_layers()["(shared by the layers)"] == 2 * 2 * 256 * 256  # (b,1,s,s) bf16
    assert [m for m, _ in full.layers] == [2 * 2 * 256 * 768] * 2  # each layer's bf16 input
    assert full.categories["activations"][0] < none.categories["activations"][0]
    assert full.peak["measured"] == pytest.approx(full.peak["predicted"], rel=1e-3)


def test_cli_recompute_full_json(capsys):
    argv = ["measure", "--hf-config", "gpt2", "--layers", "1", "--full", "--seq", "64", "--recompute", "full", "--json"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["setup"]["recompute"] == "full"
    assert out["categories"]["activations"][0] == out["categories"]["activations"][1]


@pytest.mark.parametrize(("argv", "says"), [
    (["--full", "--recompute", "selective"], "recompute must be none or full with --full (got 'selective'"),
    (["--full", "--recompute", "op"], "recompute must be one of"),
    (["--full", "--recompute", ""], "recompute must be one of"),
    (["--recompute", "full"], "recompute needs --full"),
    (["--full", "--gradient-checkpointing"], "needs --finetune"),
])
def test_bad_recompute_is_one_line(capsys, argv, says):
    assert main(["measure", "--hf-config", "gpt2", "--layers", "1", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert says in err and "\n" not in err
