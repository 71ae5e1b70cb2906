"""Fine-tuning framework conventions under ``labkit measure --full``: the loss over sequence chunks
(``labkit.measure.chunked_loss``) beside ``labkit.predict.loss_chunks``, against transformers' loss over the whole
fp32 logits, for full training and LoRA; the reserved estimate labelled as one; one-line refusals.

Cost: about 10 s on 2 cores, one process (one layer at Llama-2-7B's widths).
"""

from __future__ import annotations

import pytest

from labkit.cli import main
from labkit.measure.fake_full import measure_full
from labkit.predict.finetune import Finetune

SEQ, VOCAB = 1024, 32000


def _run(chunks, **kw):
    return measure_full("llama-2-7b", 1, SEQ, "bf16-mixed", layers=1, progress=lambda s: None, loss_chunks=chunks,
                        **kw)


def test_chunked_loss_drops_the_log_probabilities_and_the_forward_logits():
    whole, one, four = _run(None), _run(1), _run(4)
    for r in (whole, one, four):
        for name, (m, p) in r.categories.items():
            assert m == p, name
    # transformers keeps 4*b*s*V fp32 log-probabilities; the chunked loss keeps only the padded int64 labels
    saved = whole.categories["activations"][0] - one.categories["activations"][0]
    assert saved == 4 * SEQ * VOCAB + 8 * SEQ + 8 + 4 - 8 * (SEQ + 1)
    fwd = [r.peak["by_phase"]["measured"]["forward"] for r in (whole, one, four)]
    assert fwd[0] > fwd[1] > fwd[2]
    assert fwd[1] - fwd[2] == 8 * VOCAB * (SEQ - SEQ // 4)  # one chunk's fp32 logits and log-softmax
    for r in (one, four):
        measured, predicted = r.peak["by_phase"]["measured"], r.peak["by_phase"]["predicted"]
        assert measured["forward"] == pytest.approx(predicted["forward"], abs=1024)
        if r is four:  # its worst moment: a later chunk's weight gradient; one chunk's lies in the layer, where
            # step_peak's own moment is 4.3% below the measurement at this length (labkit.predict.step_peak's)
            assert measured["backward"] == pytest.approx(predicted["backward"], abs=1024)
        assert r.peak["measured"] == pytest.approx(r.peak["predicted"], rel=1e-3)
        assert r.setup["loss_chunks"] in (1, 4)


def test_lora_chunked_loss_activations_to_the_byte_and_reserved_is_labelled():
    r = _run(4, finetune=Finetune("lora", 8, ("q", "v")))
    for name, (m, p) in r.categories.items():
        assert m == p, name
    assert r.peak["predicted"] is None  # finetune_peak assumes transformers' loss: not claimed
    c = r.cuda
    assert c["reserved_estimate"] > c["measured_peak_rounded"] > 0
    assert "reserved, an estimate (not measured)" in str(r)


@pytest.mark.parametrize(("argv", "says"), [
    (["--full", "--loss-chunks", "0"], "loss_chunks must be a positive integer (got 0)"),
    (["--full", "--loss-chunks", "two"], "loss_chunks must be a positive integer (got 'two')"),
    (["--full", "--loss-chunks", "-3"], "loss_chunks must be a positive integer"),
    (["--loss-chunks", "4"], "loss_chunks needs --full"),
    (["--full", "--seq", "64", "--loss-chunks", "99999999999999999999"], "loss_chunks must be between 1 and seq (64)"),
    (["--full", "--loss-chunks", "2", "--cache"], "loss_chunks takes recompute none, cache off"),
    (["--full", "--loss-chunks", "4", "--recompute", "full"], "loss_chunks takes recompute none"),
    (["--full", "--loss-chunks", "4", "--precision", "bf16-autocast"], "loss_chunks takes recompute none"),
])
def test_bad_conventions_are_one_line(capsys, argv, says):
    assert main(["measure", "--hf-config", "gpt2", "--layers", "1", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert says in err and "\n" not in err
