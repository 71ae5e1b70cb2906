"""``labkit advise`` with an explicit shape and layout: priced as given, bad flags named, exit statuses."""

from __future__ import annotations

import json

import pytest

from labkit.advisor import calibration
from labkit.cli import main

GPT3 = ("advise", "--model", "gpt3-175b", "--batch", "1536", "--seq", "2048")
MEGATRON = (*GPT3, "--dp", "8", "--tp", "8", "--pp", "16", "--micro-batch", "1", "--recompute", "full")


def advise_json(capsys, *argv: str, status: int = 0) -> dict:
    assert main([*argv, "--json"]) == status
    return json.loads(capsys.readouterr().out)


def test_a_complete_layout_is_priced_as_given_and_comes_first(capsys):
    out = advise_json(capsys, *MEGATRON, "--top", "3")
    first = out["plans"][0]
    assert out["gpus"] == 1024  # dp x tp x pp, with --gpus left out
    assert first["exact"] and first["feasible"] and (first["dp"], first["tp"], first["pp"]) == (8, 8, 16)
    assert first["recompute"] == "full" and first["zero_stage"] == 0 and first["schedule"] == "1f1b"
    for key in ("dp", "tp", "pp", "step_s", "memory_bytes", "feasible", "reason"):
        assert key in first
    assert first["step_s"] == pytest.approx(sum(first["times_s"].values()))
    parts = ("parameters", "gradients", "optimizer", "activations")
    states_acts = first["memory_bytes"]["states_plus_activations"]
    assert states_acts == pytest.approx(sum(first["memory_bytes"][k] for k in parts))
    # fit is judged on the predicted step peak: states + activations plus the step's transients (issue 22)
    assert states_acts < first["memory_bytes"]["total"] < 1.05 * states_acts
    assert len(out["plans"]) >= 2 and all(not p["exact"] for p in out["plans"][1:])
    assert out["usd_basis"] == "rented" and first["kg_co2"] > 0


def test_a_table1_row_from_the_command_line_matches_the_library(capsys):
    row = calibration.compare("table1")[-1]  # the 1 trillion parameter model
    out = advise_json(capsys, "advise", "--layers", "128", "--hidden", "25600", "--heads", "160", "--vocab", "51200",
                      "--seq", "2048", "--batch", "3072", "--gpus", "3072", "--dp", "6", "--tp", "8", "--pp", "64",
                      "--recompute", "full", "--schedule", "interleaved", "--chunks", "2", "--sp", "off", "--top", "0",
                      "--attention", "explicit", "--framework", "megatron-2021")
    assert out["plans"][0]["step_s"] == pytest.approx(row.predicted_s)
    assert 0.85 <= out["plans"][0]["step_s"] / row.paper_s <= 1.15


def test_a_partial_layout_searches_the_rest(capsys):
    out = advise_json(capsys, *GPT3, "--gpus", "1024", "--tp", "8", "--recompute", "full", "--top", "4")
    assert out["plans"] and all(p["tp"] == 8 and p["recompute"] == "full" for p in out["plans"])
    assert not any(p["exact"] for p in out["plans"])


def test_gpt3_on_one_rtx4090_workstation_is_rejected_with_the_hosts_limits(capsys):
    status = main(["advise", "--model", "gpt3-175b", "--gpu", "RTX-4090", "--gpus", "1", "--batch", "8"])
    text = capsys.readouterr().out
    assert status == 1
    assert "no plan fits" in text and "workstation-rtx4090" in text and "128 GB DRAM" in text and "2 TB NVMe" in text
    assert "nearest misses" in text and "short by" in text
    out = advise_json(capsys, "advise", "--model", "gpt3-175b", "--gpu", "RTX-4090", "--gpus", "1", "--batch", "8",
                      status=1)
    assert out["kept_count"] == 0 and out["nearest_misses"] and out["host"] == "workstation-rtx4090"
    assert all("short by" in m["gap"] for m in out["nearest_misses"])


def test_a_layout_that_does_not_fit_exits_1_with_what_closes_the_gap(capsys):
    out = advise_json(capsys, "advise", "--model", "gpt3-175b", "--batch", "1024", "--dp", "1024", "--tp", "1",
                      "--pp", "1", status=1)
    assert not out["plans"][0]["feasible"] and out["plans"][0]["rule"] == "memory"
    assert "short by" in out["nearest_misses"][0]["gap"]


def test_rtx4090_dollars_are_owned_and_carbon_unknown_never_nan(capsys):
    status = main(["advise", "--model", "llama2-7b", "--gpu", "RTX-4090", "--gpus", "1", "--batch", "8", "--goal",
                   "fit"])
    text = capsys.readouterr().out
    assert status == 0 and "USD (owned)" in text and "nan" not in text.lower().split()
    assert "unknown" in text and "memory_energy_pj_per_bit" in text
    out = advise_json(capsys, "advise", "--model", "llama2-7b", "--gpu", "RTX-4090", "--gpus", "1", "--batch", "8")
    assert all(p["kg_co2"] is None and p["usd_basis"] == "owned" for p in out["plans"])


def test_greenest_without_energy_figures_says_what_is_missing_and_exits_2(capsys):
    assert main(["advise", "--model", "llama2-7b", "--gpu", "RTX-4090", "--gpus", "1", "--batch", "8", "--goal",
                 "greenest"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("labkit: error: goal greenest needs energy figures") and "memory_energy_pj_per_bit" in err


def test_headroom_is_stated_and_adjustable(capsys):
    tight = advise_json(capsys, *MEGATRON, "--headroom", "0", "--top", "1")
    loose = advise_json(capsys, *MEGATRON, "--headroom", "25%", "--top", "1")
    assert tight["headroom"] == 0 and loose["headroom"] == 0.25
    assert main([*MEGATRON]) == 0 and "10% of each GPU's memory kept free" in capsys.readouterr().out


def test_near_ties_are_marked(capsys):
    out = advise_json(capsys, *GPT3, "--gpus", "1024", "--top", "5")
    assert out["plans"][0]["tie"] or out["plans"][0]["step_s"] * 1.03 < out["plans"][1]["step_s"]
    assert out["tie_within"] == 0.03


BAD = [
    (["--dp", "0"], "dp must be a positive integer (got 0)"),
    (["--tp", "-2"], "tp must be a positive integer (got -2)"),
    (["--pp", "x"], "pp must be a positive integer (got 'x')"),
    (["--micro-batch", "0"], "micro_batch must be a positive integer"),
    (["--chunks", "-1"], "chunks must be a positive integer"),
    (["--gpus", "1024", "--dp", "8", "--tp", "8", "--pp", "8"],
     "dp x tp x pp must equal --gpus 1024 (got 8 x 8 x 8 = 512)"),
    (["--tp", "5"], "tp must divide the 96 attention heads: one of 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 96 (got 5)"),
    (["--pp", "7"], "pp must divide the 96 layers (one of 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 96), or give "
                    "--first-stage-layers and --last-stage-layers (balanced: "),
    (["--zero", "4"], "zero must be one of 0, 1, 2, 3 (got 4)"),
    (["--zero", "-1"], "zero must be one of 0, 1, 2, 3"),
    (["--recompute", "half"], "recompute must be one of none, selective, full, op (got 'half')"),
    (["--schedule", "zb"], "schedule must be one of 1f1b, gpipe, interleaved (got 'zb')"),
    (["--offload", "tape"], "offload must be one of none, dram, nvme (got 'tape')"),
    (["--precision", "fp4"], "precision must be one of bf16-mixed, fp32, fp8 (got 'fp4')"),
    (["--sp", "maybe"], "sp must be one of on, off"),
    (["--chunks", "2"], "chunks must be 1 unless --schedule interleaved (got 2)"),
    (["--pp", "16", "--schedule", "interleaved", "--chunks", "4"],
     "chunks must divide the 6 layers of a pipeline stage"),
    (["--dp", "7"], "dp must divide the global batch 1536: one of"),
    (["--dp", "8", "--micro-batch", "5"], "micro_batch must divide the 192 sequences per data-parallel rank"),
    (["--headroom", "1.5"], "headroom must be a fraction of GPU memory kept free, 0 to 0.99 (or 0% to 99%)"),
    (["--headroom", "-0.1"], "headroom must be a fraction"),
    (["--host", "dgx-h100-host"], "host must be one built with A100-80GB: dgx-h100-host holds H100-SXM"),
    (["--host", "mainframe"], "host must be one of"),
    (["--gpus", "1024", "--gpus-per-node", "16"],
     "gpus_per_node must be at most the 8 GPU slots of host dgx-a100-host"),
]


@pytest.mark.parametrize(("argv", "message"), BAD, ids=[" ".join(a) for a, _ in BAD])
def test_bad_flags_are_one_line_naming_the_flag_and_exit_2(capsys, argv, message):
    assert main([*GPT3, *argv]) == 2
    captured = capsys.readouterr()
    assert captured.err.splitlines() == [captured.err.strip()] and captured.err.startswith("labkit: error: ")
    assert message in captured.err and captured.out == ""


SHAPE_BAD = [
    (["--layers", "24", "--hidden", "2304", "--heads", "24", "--vocab", "51200", "--batch", "8"],
     "shape needs --layers, --hidden, --heads, --seq, --vocab together (missing --seq)"),
    (["--layers", "24", "--hidden", "2304", "--heads", "24", "--vocab", "51200", "--seq", "2048", "--kv-heads", "5",
      "--batch", "8"], "kv_heads must divide the 24 attention heads: one of 1, 2, 3, 4, 6, 8, 12, 24 (got 5)"),
    (["--params", "7e9", "--batch", "8"], "params must not be used with advise"),
    (["--layers", "0", "--hidden", "2304", "--heads", "24", "--vocab", "51200", "--seq", "2048", "--batch", "8"],
     "layers must be a positive integer"),
]


@pytest.mark.parametrize(("argv", "message"), SHAPE_BAD, ids=[" ".join(a) for a, _ in SHAPE_BAD])
def test_bad_shapes_are_one_line_and_exit_2(capsys, argv, message):
    assert main(["advise", *argv]) == 2
    captured = capsys.readouterr()
    assert captured.err.splitlines() == [captured.err.strip()] and message in captured.err


def test_a_gqa_shape_with_kv_heads_is_priced(capsys):
    out = advise_json(capsys, "advise", "--layers", "32", "--hidden", "4096", "--heads", "32", "--kv-heads", "8",
                      "--ffn", "14336", "--vocab", "128256", "--seq", "8192", "--batch", "64", "--gpus", "8",
                      "--dp", "8", "--tp", "1", "--pp", "1", "--zero", "3", "--recompute", "full")
    assert out["plans"][0]["exact"] and out["plans"][0]["feasible"]
