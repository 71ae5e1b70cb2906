"""The fine-tuning calculators (hypothesis), NF4 storage, ``labkit estimate --finetune`` and the papers' claims."""

import json

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from labkit.cli import main
from labkit.errors import LabkitError
from labkit.measure.nf4 import NF4Linear
from labkit.predict.finetune import (
    Finetune,
    adapter_tensors,
    finetune_bytes,
    frozen_bytes,
    matrix_shapes,
    nf4_bytes,
    parse_targets,
)
from labkit.predict.finetune_claims import check_claims, qlora_without
from labkit.predict.finetune_peak import FinetuneStep, finetune_peak
from labkit.shapes import model_shape
from labkit.shapes.hf_config import shape_from_hf_config

LLAMA7B = shape_from_hf_config("llama-2-7b")


@given(st.integers(1, 64), st.sampled_from(["q,v", "all-linear", "o", "gate,down"]))
@settings(max_examples=30, deadline=None)
def test_adapters_are_r_times_in_plus_out(rank, targets):
    ft = Finetune("lora", rank, parse_targets(targets, True))
    mats = matrix_shapes(LLAMA7B)
    per_layer = sum(rank * (mats[t][0] + mats[t][1]) for t in ft.targets)
    assert sum(adapter_tensors(LLAMA7B, ft)) == per_layer * LLAMA7B.layers
    fb = finetune_bytes(LLAMA7B, ft, 16, 1, "bf16-mixed")
    assert fb.adapters == fb.gradients == 2 * fb.adapter_params and fb.optimizer == 12 * fb.adapter_params
    assert fb.frozen == 2 * LLAMA7B.params  # LoRA's frozen base: every weight once, at 16 bits


@given(st.integers(1, 2**24).map(lambda k: 128 * k), st.booleans())
@settings(max_examples=50, deadline=None)
def test_nf4_is_about_half_a_byte(n, dq):
    per = nf4_bytes(n, dq) / n
    assert 0.5 < per <= (0.5 + 8 / 64 + 4 / 128 + 4 / 128 if dq else 0.5 + 4 / 64)
    assert nf4_bytes(n, True) <= nf4_bytes(n, False) or n < 3 * 64  # one fp32 mean and scale cost more at first


@given(st.integers(1, 4096), st.integers(1, 8))
@settings(max_examples=30, deadline=None)
def test_activations_grow_with_seq_and_checkpointing_keeps_one_tensor_a_layer(seq, batch):
    ft = Finetune("qlora", 16, ("q", "v"))
    plain = finetune_bytes(LLAMA7B, ft, seq, batch, "bf16-mixed")
    ckpt = finetune_bytes(LLAMA7B, Finetune("qlora", 16, ("q", "v"), checkpointing=True), seq, batch, "bf16-mixed")
    assert ckpt.per_layer == (2 * seq * batch * LLAMA7B.hidden,) * LLAMA7B.layers
    assert ckpt.activations < plain.activations
    assert finetune_bytes(LLAMA7B, ft, seq + 1, batch, "bf16-mixed").activations > plain.activations


def test_nf4_storage_matches_its_prediction_and_decodes_close():
    w = torch.randn(96, 64)
    for dq in (False, True):
        layer = NF4Linear(w, None, double_quant=dq)
        assert sum(b.untyped_storage().nbytes() for b in layer.buffers()) == nf4_bytes(w.numel(), dq)
        err = (layer.dequantize(torch.float32) - w).abs().mean() / w.abs().mean()
        assert err < 0.12  # NF4's 16 levels: about 9% mean error on normal weights
        x = torch.randn(3, 64, requires_grad=True)
        y = layer(x)
        y.sum().backward()
        assert torch.allclose(x.grad, layer.dequantize(torch.float32).sum(0).expand(3, 64), atol=1e-5)


def test_qlora_base_quantizes_matrices_only():
    lora = frozen_bytes(LLAMA7B, Finetune("lora", 8, ("q", "v")), "bf16-mixed")
    qlora = frozen_bytes(LLAMA7B, Finetune("qlora", 8, ("q", "v")), "bf16-mixed")
    embeddings = 2 * 2 * LLAMA7B.vocab * LLAMA7B.hidden  # embedding and output layer stay bf16
    assert embeddings < qlora < lora / 3


@pytest.mark.parametrize(("ft", "message"), [
    (lambda: Finetune("lora", 0), "lora_rank must be a whole number of at least 1 (got 0)"),
    (lambda: Finetune("lora", 8193, ("q",)).check(LLAMA7B, "bf16-mixed"), "lora_rank must be at most 4096"),
    (lambda: parse_targets("q,proj", True), "lora_targets must be names from q, k, v, o, gate, up, down"),
    (lambda: Finetune("qlora", 8, ("q",)).check(LLAMA7B, "fp32"), "precision must be bf16-mixed with finetune qlora"),
    (lambda: Finetune("adapter"), "finetune must be one of lora, qlora"),
])
def test_bad_input_names_the_field(ft, message):
    with pytest.raises(LabkitError, match=message.replace("(", r"\(").replace(")", r"\)")):
        ft()


def test_estimate_says_whether_it_fits_and_by_how_much(capsys):
    argv = ["estimate", "--hf-config", "llama-2-7b", "--finetune", "qlora", "--lora-rank", "16", "--seq", "2048",
            "--gpu", "rtx-4090"]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "fits on RTX-4090" in text and "spare" in text and "lever: gradient checkpointing on" in text
    assert main([*argv, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    fit = out["fit"]
    assert fit["fits"] and fit["headroom_bytes"] == pytest.approx(fit["usable_bytes"] - fit["bytes"])
    assert out["levers"]["gradient_checkpointing on"] > fit["headroom_bytes"]
    peak = finetune_peak(FinetuneStep(LLAMA7B, Finetune("qlora", 16, ("q", "v")), 1, 2048, device="cuda"))
    assert fit["bytes"] == peak.peak


def test_estimate_lora_on_all_linear_at_long_seq_does_not_fit(capsys):
    assert main(["estimate", "--hf-config", "llama-2-7b", "--finetune", "lora", "--lora-targets", "all-linear",
                 "--seq", "4096", "--gpu", "rtx-4090", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert not out["fit"]["fits"] and out["fit"]["headroom_bytes"] < 0
    longest = out["levers"]["longest seq"]
    assert 0 < longest < 4096 and out["levers"]["longest seq, checkpointing on"] > longest
    ft = Finetune("lora", 8, parse_targets("all-linear", True))
    from labkit.hardware import load_catalogue
    from labkit.predict.finetune_fit import fit

    gpu = load_catalogue().gpu("rtx-4090")
    assert fit(LLAMA7B, ft, 1, longest, gpu)["fits"] and not fit(LLAMA7B, ft, 1, longest + 1, gpu)["fits"]


def test_estimate_refuses_qlora_in_fp32(capsys):
    assert main(["estimate", "--hf-config", "llama-2-7b", "--finetune", "qlora", "--precision", "fp32"]) == 2
    assert "precision must be bf16-mixed" in capsys.readouterr().err


def test_papers_claims_reproduced():
    checks = {c.id: c for c in check_claims()}
    assert set(checks) == {"qlora-65b-48gb", "qlora-33b-24gb", "lora-gpt3-training-memory", "lora-gpt3-checkpoint"}
    for c in checks.values():
        assert c.holds, c.id
        assert "GB" in c.conventions and c.source
    assert qlora_without("qlora-65b-48gb", paged=False) > 48e9  # the paged optimizer is what makes 65B fit
    assert qlora_without("qlora-33b-24gb", checkpointing=False) > 24e9
    ckpt = checks["lora-gpt3-checkpoint"]
    assert ckpt.full_claimed / ckpt.predicted == pytest.approx(10_000, rel=0.1)  # "about 10,000 times"
    assert checks["lora-gpt3-training-memory"].predicted == pytest.approx(
        2 * model_shape("gpt3-175b").params, rel=0.003)


def test_an_infinite_lora_alpha_is_refused_through_the_api():
    import math

    import pytest

    from labkit.errors import LabkitError
    from labkit.predict.finetune import Finetune

    for bad in (math.inf, math.nan):
        with pytest.raises(LabkitError, match="lora_alpha"):
            Finetune("lora", alpha=bad)
