"""``advise --finetune``: the cheapest single card that fits a fine-tune, or the fewest GPUs that do."""

import argparse
import json

import pytest

from labkit.cli.finetune_advise import advise_finetune, fewest_gpus, finetune_advice
from labkit.cli.finetune_args import add_finetune_flags
from labkit.cli.shape_args import add_shape_flags
from labkit.errors import LabkitError
from labkit.hardware import load_catalogue
from labkit.predict.finetune import Finetune, parse_targets
from labkit.predict.finetune_fit import fit
from labkit.shapes import model_shape
from labkit.shapes.hf_config import shape_from_hf_config


def _args(*argv):
    p = argparse.ArgumentParser()
    add_shape_flags(p)
    add_finetune_flags(p)
    p.add_argument("--micro-batch")
    p.add_argument("--precision")
    p.add_argument("--recompute")
    p.add_argument("--json", action="store_true")
    return p.parse_args(list(argv))


def test_qlora_7b_cheapest_single_card_is_the_consumer_card(capsys):
    assert advise_finetune(_args("--hf-config", "llama-2-7b", "--finetune", "qlora", "--lora-rank", "16",
                                 "--seq", "2048", "--json")) == 0
    out = json.loads(capsys.readouterr().out)
    fits = [r for r in out["cards"] if r["fits_alone"]]
    assert out["cheapest_single"] == min(fits, key=lambda r: r["price_usd"])["gpu"] == "RTX-4090"


def test_a_70b_lora_needs_several_smaller_gpus():
    shape = shape_from_hf_config("llama-2-70b")
    ft = Finetune("lora", 16, parse_targets(None, True), checkpointing=True)
    out = finetune_advice(shape, ft, 1, 2048)
    # 141 GB of 16-bit weights fit only the cards of 141 GB and more (H200, B200, GB200, MI300X): the MI300X is the
    # cheapest of them at the catalogue's estimates (issue 39)
    assert out["cheapest_single"] == "MI300X"
    rows = {r["gpu"]: r for r in out["cards"]}
    a100 = load_catalogue().gpu("A100-80GB")
    assert not fit(shape, ft, 1, 2048, a100)["fits"]
    n = fewest_gpus(shape, ft, 1, 2048, a100)
    assert n == rows["A100-80GB"]["fewest_gpus"] >= 2
    assert rows["RTX-4090"]["fewest_gpus"] > n  # a smaller card takes more shards


def test_advise_refuses_fp32_and_a_parameter_count():
    with pytest.raises(LabkitError, match="precision must be bf16-mixed"):
        advise_finetune(_args("--model", "llama2-7b", "--finetune", "lora", "--precision", "fp32"))
    with pytest.raises(LabkitError, match="finetune needs a model shape"):
        advise_finetune(_args("--params", "7e9", "--finetune", "lora"))
    assert model_shape("llama2-7b").gated
