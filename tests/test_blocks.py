"""The repeated layers are found by structure, and a bad name lists the candidates."""

import pytest

from labkit.errors import LabkitError
from labkit.rig.blocks import find_blocks, layer_of
from labkit.rig.model import GPTConfig, TinyGPT
from labkit.shapes.hf_models import build_model, small_spec


def test_finds_the_layers_of_tinygpt_gpt2_and_llama():
    assert find_blocks(TinyGPT(GPTConfig(n_layer=2))) == "h"
    assert find_blocks(TinyGPT(GPTConfig(n_layer=1))) == "h"
    assert find_blocks(build_model(small_spec("gpt2"), device="meta")) == "transformer.h"
    assert find_blocks(build_model(small_spec("llama"), device="meta")) == "model.layers"


def test_override_is_checked():
    model = TinyGPT(GPTConfig(n_layer=2))
    assert find_blocks(model, "h") == "h"
    with pytest.raises(LabkitError, match="blocks must be one of h"):
        find_blocks(model, "layers")


def test_layer_of():
    assert layer_of("model.layers.3.mlp.up_proj", "model.layers") == (3, "mlp.up_proj")
    assert layer_of("model.norm", "model.layers") == (None, "model.norm")
    assert layer_of("h.0.attn", "h") == (0, "attn")
