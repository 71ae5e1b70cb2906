"""ZeRO-DP on real ranks: bytes per rank and elements per step equal the paper's formulas; losses equal one process.

Two process groups carry all the runs (one at 2 ranks, one at 4): each starts once and trains
every strategy in turn, because starting ranks costs more than the training itself. The group of 4
also trains a model whose embedding (66 rows) does not split over 4 ranks, to check the padding.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from labkit.errors import LabkitError
from labkit.inter_layer import zero
from labkit.predict.estimate import model_state_bytes, zero_communication_elements

ROOT = Path(__file__).resolve().parent.parent
STEPS = 5
PSI = zero.predict("ddp", 1).params
LAYERS = zero.MODEL["n_layer"]
TENSORS = 28  # parameter tensors of the default model (tied embedding counted once)
ODD = {"vocab_size": 66}


@pytest.fixture(scope="module")
def reference() -> list[float]:
    return zero.single_process_losses(STEPS)


@pytest.fixture(scope="module")
def groups() -> dict[int, list[list[zero.RankResult]]]:
    even = [{"strategy": s, "steps": STEPS} for s in zero.STRATEGIES]
    return {2: zero.run_jobs([{**job, "crosscheck": True} for job in even], world_size=2),
            4: zero.run_jobs([{**job, "steps": 3} for job in even]
                             + [{"strategy": s, "steps": 3, "model": ODD} for s in ("zero1", "zero2", "zero3")], 4)}


@pytest.fixture(scope="module")
def runs(groups) -> dict[int, dict[str, list[zero.RankResult]]]:
    """The default model's runs, by world size and strategy."""
    return {n: {job[0].strategy: job for job in jobs if job[0].model["vocab_size"] == zero.MODEL["vocab_size"]}
            for n, jobs in groups.items()}


def formula(strategy: str, n: int) -> dict[str, float]:
    """ZeRO (Rajbhandari et al., SC 2020) with fp32 AdamW: P = 4, G = 4, K = 8 bytes per parameter."""
    return {
        "ddp": {"parameters": 4 * PSI, "gradients": 4 * PSI, "optimizer": 8 * PSI},
        "zero1": {"parameters": 4 * PSI, "gradients": 4 * PSI, "optimizer": 8 * PSI / n},
        "zero2": {"parameters": 4 * PSI, "gradients": 4 * PSI / n, "optimizer": 8 * PSI / n},
        "zero3": {"parameters": 4 * PSI / n, "gradients": 4 * PSI / n, "optimizer": 8 * PSI / n},
    }[strategy]


def test_the_default_model_splits_evenly_over_2_and_4_ranks():
    assert PSI == 29568 and PSI % 4 == 0
    for n in (2, 4):
        for s in zero.STRATEGIES:
            pred = zero.predict(s, n)
            assert {k: v[0] for k, v in pred.bytes_torch.items()} == pred.bytes_paper == formula(s, n)
            assert all(len(set(v)) == 1 for v in pred.bytes_torch.values())  # every rank the same


def test_bytes_held_per_rank_equal_the_formulas_exactly(runs):
    for n, by_strategy in runs.items():
        for s, ranks in by_strategy.items():
            assert len(ranks) == n
            for r in ranks:
                assert r.params == PSI
                assert r.held == formula(s, n), (s, n, r.rank)
                assert r.held == model_state_bytes(PSI, "fp32", zero.STRATEGIES[s], n)


def test_elements_per_step_equal_the_paper_plus_what_torch_adds(runs):
    want = {
        "ddp": {"all_reduce": {"calls": 1, "elements": PSI}},  # one bucket
        "zero1": {"all_reduce": {"calls": 1, "elements": PSI}, "broadcast": {"calls": TENSORS, "elements": PSI}},
        "zero2": {"reduce_scatter": {"calls": 1, "elements": PSI}, "all_gather": {"calls": 1, "elements": PSI}},
        "zero3": {"reduce_scatter": {"calls": LAYERS + 1, "elements": PSI},  # one per FSDP group
                  "all_gather": {"calls": 2 * (LAYERS + 1), "elements": 2 * PSI}},  # forward and backward
    }
    for by_strategy in runs.values():
        for s, ranks in by_strategy.items():
            paper = zero_communication_elements(PSI, zero.STRATEGIES[s])
            for r in ranks:
                assert {k: {"calls": v["calls"], "elements": v["elements"]} for k, v in r.steady.items()} == want[s]
                assert all(v["bytes"] == 4 * v["elements"] for v in r.steady.values())  # fp32 on the wire
                assert all(step == r.steady for step in r.comm[2:])  # the same every step from step 2 on
                extra = zero.volume(r.steady) - paper
                assert extra == (PSI if s == "zero1" else 0)  # ZeroRedundancyOptimizer's broadcast: +Psi
                assert paper == (3 if s == "zero3" else 2) * PSI
        ddp_step1 = by_strategy["ddp"][0].comm[1]  # DDP rebuilds its buckets once and broadcasts the layout
        assert ddp_step1["broadcast"]["calls"] == 2 and ddp_step1["all_reduce"]["elements"] == PSI


def test_compare_rows_measured_equal_predicted(groups):
    for jobs in groups.values():
        for ranks in jobs:
            rows = zero.compare(ranks)
            assert rows and [row for row in rows if row.measured != row.predicted] == []
            if ranks[0].model["vocab_size"] == zero.MODEL["vocab_size"]:
                assert all(row.paper == row.measured for row in rows if row.name in zero.CATEGORIES)


def test_padding_when_shapes_do_not_split_is_measured_as_predicted(groups, reference):
    odd = {ranks[0].strategy: ranks for ranks in groups[4] if ranks[0].model["vocab_size"] == 66}
    psi = zero.predict("zero3", 4, ODD).params
    pad = 2 * zero.MODEL["d_model"]  # FSDP2 pads the 66 embedding rows to 68: rank 3 holds 15 real rows + 2 pad
    for r in odd["zero3"]:
        assert r.held["parameters"] == r.held["gradients"] == 4 * (psi + pad) // 4
        assert r.held["optimizer"] == 8 * (psi + pad) // 4 - (8 * pad if r.rank == 3 else 0)  # states: no padding
        assert zero.volume(r.steady) == 3 * (psi + pad)
    assert [r.held["optimizer"] for r in odd["zero1"]] == zero.predict("zero1", 4, ODD).bytes_torch["optimizer"]
    assert len({r.held["optimizer"] for r in odd["zero1"]}) > 1  # whole tensors per rank: not 8 Psi / 4 each
    assert all(r.held["gradients"] == 4 * psi // 4 for r in odd["zero2"])  # Psi = 29632 splits: no flat padding


def test_the_dispatch_count_agrees_with_what_gloo_ran(runs):
    """Second method: the profiler's gloo events. Gloo runs a reduce-scatter as a full all-reduce."""
    for s, ranks in runs[2].items():
        for r in ranks:
            as_gloo: dict[str, dict[str, int]] = {}
            for kind, v in r.steady.items():
                name = "all_reduce" if kind == "reduce_scatter" else kind
                row = as_gloo.setdefault(name, {"calls": 0, "elements": 0})
                row["calls"] += v["calls"]
                row["elements"] += v["elements"]
            assert r.profiled == as_gloo, s
            gloo = [row for row in zero.compare([r]) if row.name == "comm volume on gloo"]
            assert gloo[0].measured == zero.volume(r.steady, "gloo") == gloo[0].predicted
    assert zero.volume(runs[2]["zero2"][0].steady, "gloo") == 3 * PSI  # 2 Psi for the reduce-scatter
    assert zero.volume(runs[2]["zero3"][0].steady, "gloo") == 4 * PSI


def test_every_strategy_follows_the_single_process_loss_curve(runs, reference):
    assert reference[-1] < reference[0]
    for by_strategy in runs.values():
        for s, ranks in by_strategy.items():
            for r in ranks:
                assert r.losses == pytest.approx(reference[: len(r.losses)], rel=1e-4), (s, r.world_size, r.rank)


def test_the_uneven_model_follows_its_single_process_curve_too(groups):
    reference = zero.single_process_losses(3, model=ODD)
    for ranks in groups[4]:
        if ranks[0].model["vocab_size"] == 66:
            assert all(r.losses == pytest.approx(reference, rel=1e-4) for r in ranks)


def test_the_flat_stage_2_buffer_is_padded_when_psi_does_not_split():
    pred = zero.predict("zero2", 5)  # 29568 = 5 * 5913 + 3: the flat buffer gets 2 elements of padding
    assert pred.bytes_torch["gradients"] == [4 * 5914] * 5 and pred.comm_torch["reduce_scatter"] == 5 * 5914
    assert pred.bytes_paper["gradients"] == 4 * PSI / 5 < 4 * 5914


def test_bad_input_names_the_field_and_the_allowed_values():
    with pytest.raises(LabkitError, match=r"strategy must be one of ddp, zero1, zero2, zero3 \(got 'zero4'\)"):
        zero.run_strategy("zero4")
    with pytest.raises(LabkitError, match=r"world_size must divide batch_size=8: allowed 1, 2, 4, 8 \(got 3\)"):
        zero.run_strategy("ddp", world_size=3)
    with pytest.raises(LabkitError, match="world_size must be a positive integer"):
        zero.run_strategy("ddp", world_size=0)
    with pytest.raises(LabkitError, match="dropout must be 0.0"):
        zero.run_strategy("ddp", model={"dropout": 0.1})
    with pytest.raises(LabkitError, match="strategy must be one of"):
        zero.predict("fsdp", 2)
    with pytest.raises(LabkitError, match="backend must be one of nccl, gloo"):
        zero.volume({}, "mpi")


def test_zero3_runs_under_torchrun_on_loopback(reference, torchrun):
    result = torchrun("labkit.inter_layer.zero", "--strategy", "zero3", "--steps", "2")
    assert result["strategy"] == "zero3" and result["world_size"] == 2 and result["rank"] == 0
    assert result["held"] == formula("zero3", 2)
    assert result["losses"] == pytest.approx(reference[:2], rel=1e-4)
