"""Every bad value of advise's new flags: one line naming the flag and the allowed values, exit 2 (issue 21)."""

from __future__ import annotations

import pytest

from labkit.cli import main

LLAMA = ("advise", "--model", "llama2-7b", "--batch", "64", "--gpu", "H100-SXM", "--gpus", "16")
EXACT = (*LLAMA, "--dp", "2", "--tp", "8")  # pp given per case
SHAPE = ("advise", "--layers", "32", "--hidden", "4096", "--heads", "32", "--vocab", "32000", "--seq", "4096",
         "--batch", "8", "--gpus", "8")

CASES = [
    # uneven pipeline stages
    (EXACT, ["--pp", "1", "--first-stage-layers", "0"], "first_stage_layers must be a positive integer"),
    (EXACT, ["--pp", "1", "--first-stage-layers", "-3"], "first_stage_layers must be a positive integer"),
    (EXACT, ["--pp", "1", "--first-stage-layers", "2.5"], "first_stage_layers must be a positive integer"),
    (EXACT, ["--pp", "1", "--first-stage-layers", "x"], "first_stage_layers must be a positive integer"),
    (EXACT, ["--pp", "1", "--last-stage-layers", "0"], "last_stage_layers must be a positive integer"),
    (EXACT, ["--pp", "1", "--last-stage-layers", "-1"], "last_stage_layers must be a positive integer"),
    (EXACT, ["--pp", "1", "--last-stage-layers", "1e-3"], "last_stage_layers must be a positive integer"),
    (LLAMA, ["--first-stage-layers", "4"], "first_stage_layers and last_stage_layers need --pp"),
    (LLAMA, ["--last-stage-layers", "4"], "first_stage_layers and last_stage_layers need --pp"),
    (EXACT, ["--pp", "1", "--first-stage-layers", "4"], "first_stage_layers and last_stage_layers need pp > 1"),
    (("advise", "--model", "llama2-7b", "--batch", "64", "--gpu", "H100-SXM", "--gpus", "16", "--dp", "1",
      "--tp", "8"), ["--pp", "2", "--first-stage-layers", "10", "--last-stage-layers", "10"],
     "first_stage_layers + last_stage_layers must equal the 32 layers with pp=2 (got 10 + 10)"),
    (("advise", "--model", "llama2-7b", "--batch", "64", "--gpu", "H100-SXM", "--gpus", "32", "--dp", "1",
      "--tp", "8"), ["--pp", "4", "--first-stage-layers", "5", "--last-stage-layers", "6"],
     "first_stage_layers and last_stage_layers must leave the 2 middle stages an equal share"),
    (("advise", "--model", "llama2-7b", "--batch", "64", "--gpu", "H100-SXM", "--gpus", "32", "--dp", "1",
      "--tp", "8"), ["--pp", "4", "--first-stage-layers", "16", "--last-stage-layers", "16"],
     "must leave the 2 middle stages an equal share of at least one layer"),
    (("advise", "--model", "llama2-7b", "--batch", "64", "--gpu", "H100-SXM", "--gpus", "40", "--gpus-per-node",
      "8", "--dp", "1", "--tp", "8"), ["--pp", "5"], "pp must divide the 32 layers (one of 1, 2, 4, 8, 16, 32)"),
    # framework
    (LLAMA, ["--framework", "deepspeed"],
     "framework must be one of megatron-2021, megatron-te, fsdp, eager, deepspeed-2021"),
    (LLAMA, ["--framework", ""], "framework must be one of megatron-2021"),
    (LLAMA, ["--framework", "FSDP2"], "framework must be one of"),
    # network
    (LLAMA, ["--network", "wifi"], "link must be one of"),
    (LLAMA, ["--network", "nvlink4"], "network must be a link between hosts: one of ib-hdr, ib-ndr, roce-400"),
    (LLAMA, ["--network", "pcie5"], "network must be a link between hosts"),
    (LLAMA, ["--network-ports", "0"], "network_ports must be a positive integer"),
    (LLAMA, ["--network-ports", "-8"], "network_ports must be a positive integer"),
    (LLAMA, ["--network-ports", "2.5"], "network_ports must be a positive integer"),
    (LLAMA, ["--network-ports", "many"], "network_ports must be a positive integer"),
    (LLAMA, ["--network-ports", "65"], "network_ports must be a positive integer of at most 64 per host"),
    # tokens
    (LLAMA, ["--tokens", "0"], "tokens must be a positive integer"),
    (LLAMA, ["--tokens=-1e12"], "tokens must be a positive integer"),
    (LLAMA, ["--tokens", "lots"], "tokens must be a positive integer"),
    (LLAMA, ["--tokens", "1.5"], "tokens must be a positive integer"),
    (LLAMA, ["--tokens", "nan"], "tokens must be a positive integer"),
    # precision
    (LLAMA, ["--precision", "fp4"], "precision must be one of bf16-mixed, fp32, fp8"),
    (LLAMA, ["--precision", "FP8"], "precision must be one of bf16-mixed, fp32, fp8"),
    (("advise", "--model", "llama2-7b", "--batch", "64", "--gpu", "A100-80GB", "--gpus", "8", "--dp", "8", "--tp",
      "1", "--pp", "1", "--zero", "3"), ["--precision", "fp8"],
     "precision fp8 needs a GPU with FP8 tensor cores: one of H100-SXM, H100-HBM2e-96GB, H200, B200, GB200, MI300X, "
     "L40S (got A100-80GB)"),
    (("advise", "--model", "gpt2", "--batch", "8", "--gpu", "V100-32GB", "--gpus", "1", "--dp", "1", "--tp", "1",
      "--pp", "1"), ["--precision", "fp8"], "precision fp8 needs a GPU with FP8 tensor cores"),
    # attention
    (LLAMA, ["--attention", "flash3"], "attention must be one of fused (also: flash, sdpa), explicit (also: eager)"),
    (LLAMA, ["--attention", ""], "attention must be one of fused"),
    # shape style flags
    (LLAMA, ["--gated"], "--gated is a custom-shape flag: give it with --layers --hidden --heads --vocab --seq"),
    (LLAMA, ["--untied"], "--untied is a custom-shape flag"),
    (LLAMA, ["--norm", "rms"], "--norm is a custom-shape flag"),
    (SHAPE, ["--norm", "batch"], "norm must be one of rms, layer (got 'batch')"),
    (SHAPE, ["--norm", "RMSNorm"], "norm must be one of rms, layer"),
    (SHAPE, ["--norm", ""], "norm must be one of rms, layer"),
    # schedule and chunks with uneven stages
    (("advise", "--model", "llama2-7b", "--batch", "64", "--gpu", "H100-SXM", "--gpus", "32", "--dp", "1",
      "--tp", "8"), ["--pp", "4", "--first-stage-layers", "7", "--last-stage-layers", "7", "--schedule",
                     "interleaved", "--chunks", "2"], "chunks must divide the 7 layers of a pipeline stage"),
    (LLAMA, ["--chunks", "0"], "chunks must be a positive integer"),
    (LLAMA, ["--calibration", "/nonexistent/calibration.toml"], "calibration"),
    # context parallelism
    (LLAMA, ["--cp", "0"], "cp must be a positive integer (got 0)"),
    (LLAMA, ["--cp", "-2"], "cp must be a positive integer"),
    (LLAMA, ["--cp", "1.5"], "cp must be a positive integer"),
    (LLAMA, ["--cp", "two"], "cp must be a positive integer"),
    (LLAMA, ["--seq", "4096", "--cp", "3"],
     "cp must split the 4096 positions into 2 x cp equal chunks (Megatron's causal load balance): one of 1, 2, 4"),
    (LLAMA, ["--seq", "4000", "--cp", "32"], "cp must split the 4000 positions into 2 x cp equal chunks"),
    (LLAMA, ["--cp", "2", "--attention", "explicit"], "cp must be 1 with --attention explicit: context parallelism "
     "runs attention as a ring of fused blocks"),
    (LLAMA, ["--cp", "2", "--attention", "eager"], "cp must be 1 with --attention explicit"),
    (EXACT, ["--pp", "1", "--cp", "2"], "dp x tp x pp x cp must equal --gpus 16 (got 2 x 8 x 1 x 2 = 32)"),
    (LLAMA, ["--cp", "32"], "cp must divide the 16 GPUs: one of 1, 2, 4, 8, 16 (got 32)"),
]


@pytest.mark.parametrize(("base", "argv", "message"), CASES, ids=[" ".join(a) for _, a, _ in CASES])
def test_bad_value_is_one_line_naming_the_flag_exit_2(capsys, base, argv, message) -> None:
    assert main([*base, *argv]) == 2
    err = capsys.readouterr().err
    assert err.splitlines() == [err.strip()] and err.startswith("labkit: error: ")
    assert message in err, err


def test_at_least_40_cases() -> None:
    assert len(CASES) >= 40


def test_model_and_hf_config_accept_the_same_shipped_names(capsys) -> None:
    import json

    for flag in ("--model", "--hf-config"):
        assert main(["advise", flag, "mistral-7b", "--seq", "4096", "--batch", "8", "--gpus", "8", "--top", "1",
                     "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["model"] == "mistral-7b"


@pytest.mark.parametrize("flag", ["--model", "--hf-config"])
def test_a_long_context_config_needs_seq(capsys, flag: str) -> None:
    assert main(["advise", flag, "mistral-7b", "--batch", "8", "--gpus", "8"]) == 2
    err = capsys.readouterr().err
    assert "seq must be given for mistral-7b: its config allows 32,768 positions, more than 8,192" in err


def test_a_calibration_file_replaces_the_datasheet(capsys, tmp_path) -> None:
    """Measured rates (labkit.hardware.calibration) in place of the datasheet's: half the GEMM rate, a slower step."""
    import json

    from labkit.hardware import calibration as cal

    measured = cal.Calibration("test-h200", "cuda", "2.11", "2026-12-04", "bf16", 0.5 * 789e12, 4.0e12, 20e-6, 1e-9,
                               gemm_efficiency=0.8, memory_efficiency=0.89)
    path = cal.save(measured, tmp_path / "h200.json")
    base = ["advise", "--model", "llama2-7b", "--seq", "2048", "--batch", "8", "--gpu", "H200", "--gpus", "8",
            "--dp", "8", "--tp", "1", "--pp", "1", "--zero", "3", "--top", "0", "--json"]
    assert main(base) == 0
    datasheet = json.loads(capsys.readouterr().out)["plans"][0]["step_s"]
    assert main([*base, "--calibration", str(path)]) == 0
    calibrated = json.loads(capsys.readouterr().out)["plans"][0]["step_s"]
    assert calibrated > 1.3 * datasheet
