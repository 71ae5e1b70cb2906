"""The published layouts of ``datasets/`` written as their engines' configs, read back with ``--from``, priced
exactly as with the flags; and a plan exported then read back is the same plan.

Which engine each set is written as: torchtitan's H100 tables (``torchtitan_h100.toml``) as torchtitan job TOMLs;
SC21's Table 1 (Megatron-LM) as Megatron-LM arguments, its Table 2 (DeepSpeed's ZeRO-3) as ds_configs; llm-foundry's
rows (Composer's FSDP FULL_SHARD, an engine none of the three configs belongs to) as ZeRO-3 ds_configs, the same
sharding; OPT-175B (Metaseq: FSDP with Megatron's tensor parallelism) as Megatron-LM arguments with FSDP2. Each is
also held to the reference set's own prediction, so the file prices what the published figure is compared with.
Cost: about 60 ``labkit advise`` calls in-process (no torch, no processes), about 15 s on two cores.
"""

from __future__ import annotations

import json

import pytest

from labkit.advisor import calibration
from labkit.advisor import reference_sets as rs
from labkit.cli import build_parser
from labkit.cli.advise import advise

KEEP = ("dp", "tp", "pp", "cp", "micro_batch", "zero_stage", "recompute", "offload", "precision", "schedule",
        "chunks", "sp", "attention", "first_stage_layers", "last_stage_layers", "feasible", "memory_bytes", "times_s",
        "step_s", "tokens_per_s_per_gpu", "mfu")


def priced(argv: list[str]) -> dict:
    """The layout given, priced by ``labkit advise`` (the JSON's first plan, its comparable fields)."""
    a = build_parser().parse_args(["advise", *argv, "--json", "--top", "0"])
    out, _ = advise(a)
    doc = json.loads(out)
    (plan,) = [p for p in doc["plans"] if p["exact"]]
    return {k: plan[k] for k in KEEP} | {"batch": doc["global_batch"], "seq": doc["seq"], "gpus": doc["gpus"]}


def round_trip(flags: list[str], machine: list[str], engine: str, path, shape: list[str] = ()) -> tuple[dict, dict]:
    """(priced from the flags, priced from the exported file read back)."""
    direct = priced([*flags, *machine, "--export", engine, str(path)])
    return direct, priced(["--from", str(path), *machine, *shape])


def _torchtitan_rows():
    return list(enumerate(rs._data("torchtitan_h100.toml")["row"]))


@pytest.mark.parametrize(("i", "row"), _torchtitan_rows(), ids=lambda x: str(x) if isinstance(x, int) else "")
def test_torchtitan_tables_round_trip_as_torchtitan_jobs(tmp_path, i, row):
    d = rs._data("torchtitan_h100.toml")
    g, t = row["gpus"], row["tp"]
    flags = ["--model", row["model"], "--seq", str(row["seq"]), "--batch", str(row["global_batch"]), "--gpus", str(g),
             "--dp", str(g // t), "--tp", str(t), "--pp", "1", "--micro-batch", str(row["local_batch"]), "--zero", "3",
             "--recompute", row["recompute"], "--precision", row["precision"], "--framework", "fsdp"]
    direct, back = round_trip(flags, ["--gpu", d["gpu"], "--host", d["host"]], "torchtitan", tmp_path / "job.toml")
    assert back == direct
    assert back["step_s"] == pytest.approx(rs.compare("torchtitan-h100")[i].predicted_s, rel=1e-12)


def test_llm_foundry_rows_round_trip_as_zero3_ds_configs(tmp_path):
    d = rs._data("llm_foundry_h100.toml")
    for i, row in enumerate(d["row"]):
        shape = ["--layers", str(row["layers"]), "--hidden", str(row["hidden"]), "--heads", str(row["heads"]),
                 "--vocab", str(d["vocab"]), "--seq", str(d["seq"])]
        g = row["gpus"]
        flags = [*shape, "--batch", str(row["global_batch"]), "--dp", str(g), "--tp", "1", "--pp", "1",
                 "--micro-batch", str(row["micro_batch"]), "--zero", "3", "--framework", "fsdp",
                 "--recompute", "full" if row["checkpointing"] else "none"]
        direct, back = round_trip(flags, ["--gpu", d["gpu"], "--host", d["host"]], "deepspeed",
                                  tmp_path / f"ds{i}.json", shape)
        assert back == direct, row["model"]
        assert back["step_s"] == pytest.approx(rs.compare("llm-foundry-h100")[i].predicted_s, rel=1e-12)


def test_sc21_table1_rows_round_trip_as_megatron_arguments(tmp_path):
    machine = ["--gpu", "A100-80GB", "--host", "dgx-a100-host", "--framework", "megatron-2021"]
    for i, c in enumerate(calibration.compare("table1")):
        row, lay = calibration.rows("table1")[i], c.layout
        flags = ["--layers", str(row["layers"]), "--hidden", str(row["hidden"]), "--heads", str(row["heads"]),
                 "--vocab", "51200", "--seq", "2048", "--batch", str(row["batch"]), "--dp", str(lay.dp), "--tp",
                 str(lay.tp), "--pp", str(lay.pp), "--micro-batch", "1", "--zero", "0", "--recompute", "full",
                 "--schedule", lay.schedule, "--chunks", str(lay.chunks)]
        direct, back = round_trip(flags, machine, "megatron", tmp_path / f"t1_{i}.sh")
        assert back == direct, c.label
        assert back["step_s"] == pytest.approx(c.predicted_s, rel=1e-12), c.label


def test_sc21_table2_rows_round_trip_as_zero3_ds_configs(tmp_path):
    machine = ["--gpu", "A100-80GB", "--host", "dgx-a100-host", "--framework", "deepspeed-2021"]
    for i, c in enumerate(calibration.compare("table2")):
        row = calibration.rows("table2")[i]
        shape = ["--layers", str(row["layers"]), "--hidden", str(row["hidden"]), "--heads", str(row["heads"]),
                 "--vocab", "51200", "--seq", "2048"]
        flags = [*shape, "--batch", str(row["batch"]), "--dp", str(c.gpus), "--tp", "1", "--pp", "1",
                 "--micro-batch", str(row["micro_batch"]), "--zero", "3", "--recompute", "full"]
        direct, back = round_trip(flags, machine, "deepspeed", tmp_path / f"t2_{i}.json", shape)
        assert back == direct, c.label
        assert back["step_s"] == pytest.approx(c.predicted_s, rel=1e-12), c.label


def test_opt_175b_round_trips_as_megatron_arguments_with_fsdp2(tmp_path):
    d = rs._data("opt_175b.toml")
    flags = ["--layers", str(d["layers"]), "--hidden", str(d["hidden"]), "--heads", str(d["heads"]), "--vocab",
             str(d["vocab"]), "--seq", str(d["seq"]), "--batch", str(d["global_batch"]), "--dp",
             str(d["gpus"] // d["tp"]), "--tp", str(d["tp"]), "--pp", "1", "--micro-batch", str(d["micro_batch"]),
             "--zero", "3", "--recompute", "full"]
    machine = ["--gpu", d["gpu"], "--host", d["host"], "--framework", "fsdp"]
    direct, back = round_trip(flags, machine, "megatron", tmp_path / "opt.sh")
    assert back == direct
    assert back["step_s"] == pytest.approx(rs.compare("opt-175b")[0].predicted_s, rel=1e-12)


@pytest.mark.parametrize("engine", ["torchtitan", "megatron", "deepspeed"])
def test_the_best_plan_exported_and_read_back_is_the_same_plan(tmp_path, engine):
    """No layout given: the search's best plan for each engine's constraints is written, and read back it is
    priced as the same plan."""
    fixed = {"torchtitan": ["--zero", "3", "--recompute", "op", "--pp", "1"],
             "megatron": ["--zero", "1", "--recompute", "selective"],
             "deepspeed": ["--tp", "1", "--pp", "1", "--cp", "1", "--recompute", "full"]}[engine]
    machine = ["--gpu", "H100-SXM", "--framework", "megatron-te" if engine == "megatron" else "fsdp"]
    path = tmp_path / f"plan.{ {'torchtitan': 'toml', 'megatron': 'sh', 'deepspeed': 'json'}[engine]}"
    a = build_parser().parse_args(["advise", "--model", "llama3-8b", "--batch", "64", "--gpus", "16", *machine,
                                   *fixed, "--export", engine, str(path), "--json"])
    doc = json.loads(advise(a)[0])
    best = {k: doc["plans"][0][k] for k in KEEP}
    shape = ["--model", "llama3-8b"] if engine == "deepspeed" else []  # a ds_config names no model
    back = priced(["--from", str(path), *machine, *shape])
    assert {k: back[k] for k in KEEP} == best
