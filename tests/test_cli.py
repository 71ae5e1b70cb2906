"""The command line: estimates as JSON and tables, one-line errors, the bench's rows."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from labkit.cli import main


def run_json(capsys, *argv: str) -> dict:
    assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_params_alone_gives_zero_stage_1_model_states(capsys):
    out = run_json(capsys, "estimate", "--params", "7500000000", "--dp", "64", "--zero", "1")
    assert out["per_device_bytes"]["total"] == pytest.approx(31.40625e9, rel=1e-4)
    assert out["per_device_bytes"]["activations"] == 0
    assert out["activations_per_layer_bytes"] is None
    assert out["params"] == 7_500_000_000


def test_gpt3_activations_per_layer_match_korthikanti(capsys):
    out = run_json(capsys, "estimate", "--model", "gpt3-175b", "--micro-batch", "1", "--seq", "2048",
                   "--attention", "eager")  # Korthikanti et al.'s s x s terms: the scores held (explicit)
    assert out["setup"]["attention"] == "explicit"
    s, h, a = 2048, 12288, 96
    assert out["activations_per_layer_bytes"] == s * h * (34 + 5 * a * s / h)
    assert out["model"] == "gpt3-175b"
    assert out["setup"]["seq"] == 2048 and out["setup"]["micro_batch"] == 1
    per = out["per_device_bytes"]
    assert per["total"] == pytest.approx(
        sum(per[k] for k in ("parameters", "gradients", "optimizer", "activations"))
    )


def test_custom_shape_flags(capsys):
    argv = ["estimate", "--layers", "2", "--hidden", "64", "--heads", "4", "--seq", "32", "--vocab", "100"]
    out = run_json(capsys, *argv, "--precision", "fp32")
    h, v, s = 64, 100, 32
    params_per_layer = 12 * h * h + 13 * h
    assert out["model"] == "custom"
    assert out["params"] == 2 * params_per_layer + v * h + s * h + 2 * h
    assert out["per_device_bytes"]["parameters"] == 4 * out["params"]
    assert out["setup"]["shape"]["hidden"] == 64


def test_llama2_7b_does_not_fit_a_24gb_card(capsys):
    out = run_json(
        capsys, "estimate", "--model", "llama2-7b", "--precision", "bf16-mixed", "--gpu", "rtx4090"
    )
    assert out["gpu"] == "RTX-4090"
    assert out["fits"] is False
    assert out["device_bytes"] == 24564 * 2**20  # true capacity, as nvidia-smi reports it
    assert out["judged_on"] == "predicted whole-step peak"
    assert out["usable_bytes"] < out["device_bytes"]  # what torch can allocate: the catalogue's rule on this card
    assert out["headroom_bytes"] == pytest.approx(out["usable_bytes"] - out["step_peak"]["bytes"])
    assert out["step_peak"]["bytes"] > out["per_device_bytes"]["total"]  # the step's temporaries on top


def test_human_output_is_a_table_in_gb(capsys):
    assert main(["estimate", "--model", "gpt3-175b", "--gpu", "h100"]) == 0
    text = capsys.readouterr().out
    assert "GB = 1e9 bytes" in text
    assert "174.6 bn parameters" in text  # "B" is for bytes
    assert "does not fit on H100-SXM (true capacity: 79.6 GiB = 85.5 GB)" in text
    for category in ("parameters", "gradients", "optimizer", "activations", "total"):
        assert category in text
    assert "% of the total" in text


def test_human_output_says_when_it_fits(capsys):
    assert main(["estimate", "--model", "gpt2", "--gpu", "H200"]) == 0
    assert "fits on H200 (true capacity: 140.4 GiB = 150.8 GB): yes" in capsys.readouterr().out


BAD = [
    (["--params", "10", "--zero", "4"], "zero_stage must be one of 0, 1, 2, 3"),
    (["--model", "gpt2", "--zero", "4"], "zero_stage must be one of 0, 1, 2, 3"),
    (["--model", "gpt2", "--dp", "0"], "dp must be a positive integer"),
    (["--model", "gpt2", "--dp", "-1"], "dp must be a positive integer"),
    (["--model", "gpt2", "--dp", "x"], "dp must be a positive integer (got 'x')"),
    (
        ["--layers", "2", "--hidden", "64", "--heads", "3", "--seq", "8", "--vocab", "10"],
        "heads must divide hidden",
    ),
    (["--model", "gpt2", "--tp", "5"], "tp must divide heads"),
    (["--model", "gpt2", "--gpu", "nosuchgpu"], "gpu must be one of"),
    (["--model", "nosuchmodel"], "model must be one of"),
    (["--model", "gpt2", "--recompute", "bogus"], "recompute must be one of none, selective, full, op"),
    (["--model", "gpt2", "--precision", "bogus"], "precision must be one of"),
    (["--model", "gpt2", "--micro-batch", "0"], "micro_batch must be a positive integer"),
    (["--layers", "2", "--hidden", "64"], "--heads"),
]


@pytest.mark.parametrize(("argv", "message"), BAD, ids=[" ".join(a) for a, _ in BAD])
def test_bad_input_is_one_line_and_exit_2(capsys, argv, message):
    assert main(["estimate", *argv]) == 2
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("labkit: error: ")
    assert message in lines[0]
    assert "Traceback" not in captured.err
    assert captured.out == ""


def test_unknown_gpu_and_model_list_the_choices(capsys):
    main(["estimate", "--model", "gpt2", "--gpu", "nosuchgpu"])
    assert "H100-SXM" in capsys.readouterr().err
    main(["estimate", "--model", "nosuchmodel"])
    assert "gpt3-175b" in capsys.readouterr().err


def test_hardware_lists_the_catalogue(capsys):
    assert main(["hardware"]) == 0
    text = capsys.readouterr().out
    assert "H100" in text and "NVMe" in text and "nvlink4" in text
    out = run_json(capsys, "hardware")
    assert any(g["name"] == "H100-SXM" for g in out["gpus"])


def test_installed_entry_point_fails_cleanly():
    exe = Path(sys.executable).parent / "labkit"
    path = str(exe) if exe.exists() else shutil.which("labkit")
    assert path, "the labkit entry point is not installed (pip install -e .)"
    proc = subprocess.run([path, "estimate", "--zero", "4", "--params", "10"], capture_output=True, text=True)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines() == ["labkit: error: zero_stage must be one of 0, 1, 2, 3 (got 4)"]


def test_bench_step_time_without_a_calibration_is_refused(capsys):
    from labkit.bench import main

    with pytest.raises(SystemExit) as exit_:
        main(["--step-time"])
    assert exit_.value.code == 2 and "--calibration FILE" in capsys.readouterr().err


def test_bench_rows_match_the_estimate():
    from labkit.bench import MICRO_CONFIGS, measured_vs_predicted

    rows = measured_vs_predicted(MICRO_CONFIGS[:2])
    assert len(rows) == 2
    for row in rows:
        for key in ("parameters", "gradients", "optimizer"):
            assert row["error"][key] == 0, (row["config"], key)
        assert row["error"]["activations_per_layer"] < 0.02, row


GPT3_ADVISE = ("advise", "--model", "gpt3-175b", "--gpu", "A100-80GB", "--gpus", "1024", "--batch", "1536",
               "--seq", "2048", "--goal", "fastest")


def test_advise_ranks_gpt3_plans_as_json(capsys):
    out = run_json(capsys, *GPT3_ADVISE, "--top", "3")
    assert out["model"] == "gpt3-175b" and out["gpus"] == 1024 and out["goal"] == "fastest"
    assert len(out["plans"]) == 3 and out["kept_count"] > 3
    steps = [p["step_s"] for p in out["plans"]]
    ties = [p["tie"] for p in out["plans"]]  # near-ties come first, simplest first
    assert all(s <= min(steps) * 1.03 for s, t in zip(steps, ties, strict=True) if t)
    rest = [s for s, t in zip(steps, ties, strict=True) if not t]
    assert rest == sorted(rest)
    for p in out["plans"]:
        assert p["dp"] * p["tp"] * p["pp"] == 1024 and p["tp"] <= 8 and p["feasible"]
        assert p["memory_bytes"]["total"] <= 0.9 * 80 * 2**30  # 90% of the true 80 GiB
    assert out["rejected_by_reason"]["memory"] > 0 and out["rejected_by_reason"]["tp-node"] > 0


def test_advise_text_shows_plans_and_reasons(capsys):
    assert main([*GPT3_ADVISE, "--top", "2"]) == 0
    text = capsys.readouterr().out
    assert "plans kept" in text and "GB/GPU" in text and "step s" in text
    assert "crosses the 8-GPU NVLink domain" in text and "needs 2,877.9 GB per GPU" in text


ADVISE_BAD = [
    (["--batch", "8"], "model must be given: --model ... (one of"),
    (["--model", "gpt5", "--batch", "8"], "model must be one of tiny-gpt, gpt2"),
    (["--model", "gpt2"], "batch must be given"),
    (["--model", "gpt2", "--batch", "x"], "batch must be a positive integer (got 'x')"),
    (["--model", "gpt2", "--batch", "8", "--goal", "best"], "goal must be one of fit, fastest, cheapest, greenest"),
    (["--model", "gpt2", "--batch", "8", "--gpus", "12"], "gpus must be a multiple of gpus_per_node=8"),
    (["--model", "gpt2", "--batch", "8", "--gpu", "B300"], "gpu must be one of"),
    (["--model", "gpt2", "--batch", "8", "--top", "-1"], "top must be a non-negative integer"),
]


@pytest.mark.parametrize(("argv", "message"), ADVISE_BAD, ids=[" ".join(a) for a, _ in ADVISE_BAD])
def test_advise_bad_input_is_one_line_and_exit_2(capsys, argv, message):
    assert main(["advise", *argv]) == 2
    captured = capsys.readouterr()
    assert captured.err.splitlines() == [captured.err.strip()] and captured.err.startswith("labkit: error: ")
    assert message in captured.err and captured.out == ""


T5 = ["estimate", "--params", "2851e6", "--convention", "deepspeed", "--gpus-per-node", "8", "--nodes", "1"]


@pytest.mark.parametrize(("flags", "gpu_gib", "host_gib"), [
    (["--zero", "3", "--largest-layer", "32e6"], 6.09, 1.43),
    (["--zero", "3", "--largest-layer", "32e6", "--offload-optimizer", "cpu"], 0.78, 63.72),
    (["--zero", "3", "--largest-layer", "32e6", "--offload-optimizer", "cpu", "--offload-param", "cpu"], 0.12, 71.69),
    (["--zero", "2", "--offload-optimizer", "cpu"], 5.31, 127.45),
])  # fmt: skip
def test_deepspeed_convention_reproduces_its_t5_3b_estimates(capsys, flags, gpu_gib, host_gib):
    """DeepSpeed's docs (memory.rst): t5-3b, 2851M params, 32M largest layer, 1 node x 8 GPUs (GiB printed as GB)."""
    out = run_json(capsys, *T5, *flags)
    assert out["units"] == "GiB" and out["convention"] == "deepspeed"
    assert round(out["per_device_bytes"]["total"] / 2**30, 2) == gpu_gib
    assert round(out["host_bytes_per_node"] / 2**30, 2) == host_gib
    assert main([*T5, *flags]) == 0
    assert f"{gpu_gib:.2f}" in capsys.readouterr().out


def test_conventions_differ_by_the_fp32_gradients(capsys):
    zero = run_json(capsys, "estimate", "--params", "1e9", "--zero", "3", "--dp", "1")
    deep = run_json(capsys, "estimate", "--params", "1e9", "--zero", "3", "--dp", "1", "--convention", "deepspeed",
                    "--largest-layer", "1000")
    assert zero["per_device_bytes"]["total"] == 16e9 and zero["units"] == "GB"
    assert deep["per_device_bytes"]["total"] == 18e9 + 4000 and deep["per_device_bytes"]["gather_buffer"] == 4000


def test_largest_reproduces_zero_table2(capsys):
    from labkit.references import zero_table2

    for row in zero_table2():
        for stage, printed in enumerate(row.params):
            out = run_json(capsys, "estimate", "--largest", "--gpu", "V100-32GB", "--capacity", "nominal",
                           "--zero", str(stage), "--dp", str(row.dp), "--tp", str(row.mp))
            assert out["capacity_bytes"] == 32e9 and out["counts"] == "model states only"
            assert out["largest_params"] == pytest.approx(printed, rel=0.025), (row.mp, stage)
    true = run_json(capsys, "estimate", "--largest", "--gpu", "V100-32GB", "--zero", "0")
    assert true["largest_params"] == 32510 * 2**20 // 16  # the true capacity: 32,510 MiB as nvidia-smi reports


def test_largest_unbounded_when_everything_is_offloaded(capsys):
    out = run_json(capsys, "estimate", "--largest", "--gpu", "A100-80GB", "--zero", "3", "--dp", "8",
                   "--offload-optimizer", "cpu", "--offload-param", "cpu")
    assert out["largest_params"] is None and out["bounded"] is False


BAD_CONVENTION = [
    (["--params", "1e9", "--convention", "megatron"], "--convention must be one of zero, deepspeed (got 'megatron')"),
    (["--params", "1e9", "--zero", "2", "--offload-optimizer", "nvme"], "--offload-optimizer must be one of none, cpu"),
    (["--params", "1e9", "--zero", "3", "--offload-param", "gpu"], "--offload-param must be one of none, cpu"),
    (["--params", "1e9", "--zero", "2", "--offload-optimizer", "cpu", "--offload-param", "cpu"],
     "--offload-param cpu needs --zero 3 and --offload-optimizer cpu"),
    (["--params", "1e9", "--offload-optimizer", "cpu"], "--offload-optimizer and --offload-param need --zero 1"),
    (["--params", "1e9", "--units", "MB"], "--units must be one of GB, GiB (got 'MB')"),
    (["--params", "1e9", "--nodes", "0"], "nodes must be a positive integer"),
    (["--params", "1e9", "--gpus-per-node", "-8"], "gpus-per-node must be a positive integer"),
    (["--params", "1e9", "--largest-layer", "0"], "largest-layer must be a positive integer"),
    (["--params", "1e9", "--nodes", "2", "--gpus-per-node", "8", "--dp", "4"], "--dp must be nodes x gpus-per-node"),
    (["--params", "1e9", "--nodes", "1", "--gpus-per-node", "8", "--tp", "3"], "--dp must be nodes x gpus-per-node"),
    (["--params", "1e9", "--zero-init", "yes"], "--zero-init must be one of 1, 0"),
    (["--params", "1e9", "--zero", "3", "--convention", "deepspeed"], "largest_layer must be given"),
    (["--params", "1e9", "--convention", "deepspeed", "--precision", "fp32"], "precision must be one of bf16-mixed"),
    (["--largest", "--zero", "1"], "gpu must be given with --largest"),
    (["--largest", "--gpu", "V100-32GB", "--model", "gpt2"], "give --largest without --model"),
    (["--largest", "--gpu", "V100-32GB", "--capacity", "marketing"], "--capacity must be one of true, nominal"),
]  # fmt: skip


@pytest.mark.parametrize(("argv", "message"), BAD_CONVENTION, ids=[" ".join(a) for a, _ in BAD_CONVENTION])
def test_bad_convention_flags_are_one_line_and_exit_2(capsys, argv, message):
    assert main(["estimate", *argv]) == 2
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("labkit: error: ") and message in lines[0], captured.err
    assert captured.out == ""


@pytest.mark.parametrize("convention", ["zero", "deepspeed"])
def test_the_judged_peak_is_never_below_the_tables_states_and_activations(capsys, convention):
    """DeepSpeed's convention prices larger states than ZeRO's 16 B/param: the peak is built on the table's."""
    out = run_json(capsys, "estimate", "--model", "llama2-7b", "--zero", "2", "--dp", "4", "--gpu", "h100",
                   "--convention", convention)
    assert out["step_peak"]["bytes"] >= out["per_device_bytes"]["total"]
    assert out["headroom_bytes"] == pytest.approx(out["usable_bytes"] - out["step_peak"]["bytes"])
