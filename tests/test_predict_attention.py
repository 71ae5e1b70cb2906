"""One attention vocabulary: fused (FlashAttention/sdpa, the default) or explicit, all spellings accepted."""

from __future__ import annotations

import json

import pytest

from labkit.advisor.costing import Layout
from labkit.cli import main
from labkit.errors import LabkitError
from labkit.predict import attention


@pytest.mark.parametrize("given, name, torch", [("fused", "fused", "sdpa"), ("flash", "fused", "sdpa"),
                                                ("sdpa", "fused", "sdpa"), ("SDPA", "fused", "sdpa"),
                                                ("explicit", "explicit", "eager"), ("eager", "explicit", "eager")])
def test_every_spelling_gives_one_name(given: str, name: str, torch: str) -> None:
    assert attention.attention_kind(given) == name and attention.torch_name(given) == torch
    assert Layout(1, 1, 1, attention=given).attention == name


@pytest.mark.parametrize("bad", ["", "flash2", "naive", None, 1])
def test_a_bad_spelling_names_the_field_and_both_names(bad) -> None:
    with pytest.raises(LabkitError, match=r"^attention must be one of fused \(also: flash, sdpa\), explicit"):
        attention.attention_kind(bad)


def test_fused_is_the_default_of_the_advisor_and_the_commands(capsys) -> None:
    assert Layout(1, 1, 1).attention == attention.DEFAULT == "fused"
    base = ["advise", "--model", "llama2-7b", "--batch", "8", "--gpus", "8", "--dp", "8", "--tp", "1", "--pp", "1",
            "--json"]
    main(base)
    default = json.loads(capsys.readouterr().out)["plans"][0]
    main([*base, "--attention", "sdpa"])
    sdpa = json.loads(capsys.readouterr().out)["plans"][0]
    assert default["attention"] == sdpa["attention"] == "fused" and default["step_s"] == sdpa["step_s"]
    main([*base, "--attention", "eager"])
    eager = json.loads(capsys.readouterr().out)["plans"][0]
    assert eager["attention"] == "explicit" and eager["step_s"] > default["step_s"]
    main(["estimate", "--model", "llama2-7b", "--json"])
    assert json.loads(capsys.readouterr().out)["setup"]["attention"] == "fused"


@pytest.mark.parametrize("cmd", [["advise", "--model", "llama2-7b", "--batch", "8"], ["estimate", "--model", "gpt2"]])
def test_bad_attention_flag_is_one_line_exit_2(capsys, cmd) -> None:
    assert main([*cmd, "--attention", "flashy"]) == 2
    err = capsys.readouterr().err
    assert err.splitlines() == [err.strip()] and "attention must be one of fused (also: flash, sdpa)" in err


def test_training_setup_defaults_to_fused_and_keeps_one_name() -> None:
    """The estimate's setup, the CLI and the advisor share one default (issue 21); any spelling, one name."""
    from labkit.predict.estimate import TrainingSetup, estimate_memory
    from labkit.shapes import model_shape

    shape = model_shape("llama2-7b")
    assert TrainingSetup(shape).attention == attention.DEFAULT == "fused"
    for spelling, name in (("sdpa", "fused"), ("flash", "fused"), ("eager", "explicit"), ("Explicit", "explicit")):
        assert TrainingSetup(shape, attention=spelling).attention == name
    fused = estimate_memory(TrainingSetup(shape, seq=4096)).per_device_bytes["activations"]
    explicit = estimate_memory(TrainingSetup(shape, seq=4096, attention="explicit")).per_device_bytes["activations"]
    assert explicit > 2 * fused  # the s x s scores, held for backward, only with explicit attention
    with pytest.raises(LabkitError, match="attention must be one of fused"):
        TrainingSetup(shape, attention="flash3")
