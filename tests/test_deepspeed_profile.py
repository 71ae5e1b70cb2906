"""Issue 29: a profile means its name. SC21 Table 2's ZeRO-3 rows ran DeepSpeed inside Megatron-LM (section 5.2), so
they are priced under ``deepspeed-2021``: Megatron's 2021 kernels, prefetched gathers with half exposed, the backward's
re-gather of every matrix beyond DeepSpeed's reuse distance, one network port per GPU."""

from __future__ import annotations

import json

import pytest

from labkit.advisor import assumptions, calibration, costing, steptime
from labkit.advisor.costing import Layout
from labkit.cli import main
from labkit.errors import LabkitError
from labkit.predict import profiles
from labkit.shapes import ModelShape

GPT3 = ModelShape("gpt3-175b", 96, 12288, 96, 51200, 2048)


def test_the_profile_is_named_for_deepspeed_and_keeps_megatrons_2021_kernels() -> None:
    ds, old = profiles.profile("deepspeed-2021"), profiles.profile("megatron-2021")
    assert "deepspeed-2021" in profiles.FRAMEWORKS and profiles.FRAMEWORKS[-1] == "deepspeed-2021"
    assert (ds.attention, ds.sp, ds.kernels_per_layer, ds.launch_s) == (old.attention, old.sp, old.kernels_per_layer,
                                                                         old.launch_s)
    assert ds.overlap_sharded and not old.overlap_sharded and ds.grad_accum_bytes == 0
    assert ds.reuse_distance == profiles.DEEPSPEED_REUSE_DISTANCE == 1e9 and old.reuse_distance == float("inf")
    assert calibration.FRAMEWORK == {"table1": "megatron-2021", "table2": "deepspeed-2021"}


def test_the_backward_gathers_again_what_lies_beyond_the_reuse_distance() -> None:
    ds, fsdp = profiles.profile("deepspeed-2021"), profiles.profile("fsdp")
    full = Layout(768, 1, 1, 2, 3, "full")
    # 175B: fc1's reuse distance is 2 x fc2 = 8 h^2 = 1.2e9 > 1e9, so qkv, proj and fc1 (8 of 12 h^2) are gathered again
    assert steptime.regather_share(GPT3, full, ds) == pytest.approx(8 / 12)
    small = ModelShape("13b", 40, 5120, 40, 50257, 2048)  # qkv's distance 18 h^2 = 4.7e8: all kept
    assert steptime.regather_share(small, full, ds) == 0.0
    assert steptime.regather_share(GPT3, full, fsdp) == 0.0  # FSDP keeps them from the recompute to the backward
    assert steptime.regather_share(GPT3, Layout(768, 1, 1, 2, 3, "none"), ds) == 0.0
    assert steptime.regather_share(GPT3, Layout(96, 8, 1, 2, 3, "full"), ds) == 0.0  # tp 8: 1/8 of each matrix


def test_gathers_move_the_bytes_the_rule_says() -> None:
    lay = Layout(768, 1, 1, 2, 3, "full", sp=False, attention="explicit")
    ds = costing.step_times(GPT3, 2048, 1536, lay, costing.machine("A100-80GB", 768, framework="deepspeed-2021"))
    te = costing.step_times(GPT3, 2048, 1536, lay, costing.machine("A100-80GB", 768, framework="megatron-te"))
    per = 767 / 768 * 2 * GPT3.params  # one gather or reduce-scatter of the 16-bit weights
    assert ds["peer_bytes"] == pytest.approx((2 + 8 / 12 + 1) * per)
    assert te["peer_bytes"] == pytest.approx(3 * per)


def test_one_port_per_gpu_under_deepspeed_2021_every_port_elsewhere() -> None:
    lay = Layout(768, 1, 1, 2, 3, "full")
    one = costing.links(lay, costing.machine("A100-80GB", 768, framework="deepspeed-2021"))["dp"]
    for name in ("megatron-2021", "megatron-te", "fsdp"):
        every = costing.links(lay, costing.machine("A100-80GB", 768, framework=name))["dp"]
        assert every.bandwidth >= 6 * one.bandwidth, name
    assert one.bandwidth == pytest.approx(25e9)  # one HDR port (datasets/hardware.toml)


def test_table2_prices_within_15_percent_and_the_framework_changes_the_answer() -> None:
    rows = calibration.compare("table2")
    assert all(0.85 <= c.ratio <= 1.15 for c in rows), [round(c.ratio, 3) for c in rows]
    row = calibration.rows("table2")[1]
    lay = rows[1].layout
    steps = {f: costing.step_times(GPT3, 2048, row["batch"], lay, costing.machine("A100-80GB", row["gpus"],
                                                                                  framework=f))
             for f in ("deepspeed-2021", "megatron-2021")}
    # Megatron's own data parallelism would cross every port of a node: under a quarter of DeepSpeed's exposed gathers
    assert 0 < steps["megatron-2021"]["dp"] < 0.25 * steps["deepspeed-2021"]["dp"]


def test_every_assumption_is_listed_with_its_flag_and_each_flag_changes_the_plan(capsys) -> None:
    said = " ".join(assumptions.lines(profiles.profile("deepspeed-2021")))
    for flag in assumptions.FLAGS:
        assert f"--{flag}" in said
    assert "(--exposed-share; from deepspeed-2021)" in said and "1e+09 (--reuse-distance" in said
    row = calibration.rows("table2")[1]
    args = ["advise", "--layers", "96", "--hidden", "12288", "--heads", "96", "--vocab", "51200", "--seq", "2048",
            "--dp", str(row["gpus"]), "--tp", "1", "--pp", "1", "--micro-batch", "2", "--zero", "3",
            "--recompute", "full", "--batch", str(row["batch"]), "--gpu", "A100-80GB", "--host", "dgx-a100-host",
            "--framework", "deepspeed-2021", "--top", "0", "--json"]
    steps = []
    for extra in ([], ["--reuse-distance", "inf"], ["--network-aggregation", "on"]):
        main([*args, *extra])  # exits 1 where the plan does not fit memory; the step is priced either way
        steps.append(json.loads(capsys.readouterr().out)["plans"][0]["step_s"])
    assert steps[0] > steps[1] > steps[2]
    with pytest.raises(LabkitError, match="reuse_distance must be a number of parameters"):
        assumptions.apply(profiles.profile("deepspeed-2021"), {"reuse_distance": "0"})
    with pytest.raises(LabkitError, match="exposed_share must be a share"):
        assumptions.apply(profiles.profile("deepspeed-2021"), {"exposed_share": "1.5"})
