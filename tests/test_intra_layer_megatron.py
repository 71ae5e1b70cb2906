"""Megatron tensor (and sequence) parallelism on real ranks: outputs equal one process; bytes and collectives
equal the formulas (Shoeybi et al. 2019; Korthikanti et al. 2022).

Two process groups carry all the runs (2 ranks, then 4): each trains four jobs in turn (TP and TP+SP with
dropout 0 for the equality checks, the same with dropout 0.1 to see the dropout masks in the bytes).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from labkit.errors import LabkitError
from labkit.intra_layer import megatron
from labkit.rig.model import TinyGPT, count_parameters

ROOT = Path(__file__).resolve().parent.parent
JOBS = [{"sp": False, "steps": 2}, {"sp": True, "steps": 2},
        {"sp": False, "model": {"dropout": 0.1}}, {"sp": True, "model": {"dropout": 0.1}}]
CFG = megatron.model_config()
L, B, S, H, A, F, V = CFG.n_layer, 2, CFG.seq_len, CFG.d_model, CFG.n_head, CFG.ffn_size, CFG.vocab_size
BSH, BS = B * S * H, B * S


@pytest.fixture(scope="module")
def runs() -> dict[tuple[int, bool, float], list[megatron.RankResult]]:
    """Results per rank, keyed by (tp, sp, dropout)."""
    out = {}
    for n in (2, 4):
        for job, ranks in zip(JOBS, megatron.run_jobs(JOBS, n), strict=True):
            out[(n, job["sp"], job.get("model", {}).get("dropout", 0.0))] = ranks
    return out


@pytest.fixture(scope="module")
def reference() -> dict:
    return megatron.single_process(steps=2)


def test_each_rank_gets_whole_heads_of_q_k_and_v():
    rows = megatron.qkv_rows(8, 2).tolist()  # h = 8: q rows 0-7, k 8-15, v 16-23; rank 0 takes half of each
    assert rows == [0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23]


def test_outputs_and_gradients_equal_the_single_process_model(runs, reference):
    for (n, sp, dropout), ranks in runs.items():
        if dropout:
            continue
        assert len(ranks) == n
        for r in ranks:
            assert r.losses == pytest.approx(reference["losses"], rel=1e-5), (n, sp)
            torch.testing.assert_close(r.logits, reference["logits"], rtol=1e-5, atol=1e-6)
            assert r.grads.keys() == reference["grads"].keys()
            for name, g in reference["grads"].items():
                torch.testing.assert_close(r.grads[name], g, rtol=1e-5, atol=1e-6, msg=f"{name} tp={n} sp={sp}")


def test_parameter_bytes_per_rank_equal_the_split_exactly(runs):
    with torch.device("meta"):
        assert megatron.param_bytes(1) == 4 * count_parameters(TinyGPT(CFG))  # t = 1 is the whole model
    for (n, _, _), ranks in runs.items():
        layer = 4 * H + (3 * H * H + 3 * H + H * H + F * H + F + F * H) // n + 2 * H  # norms and row biases whole
        want = 4 * (L * layer + V * H // n + S * H + 2 * H)  # tied wte split by vocabulary, wpe and ln_f whole
        assert [r.param_bytes for r in ranks] == [want] * n == [megatron.param_bytes(n)] * n
    assert megatron.param_bytes(2) == 64128 and megatron.param_bytes(4) == 37056


def test_collectives_per_kind_equal_the_analytic_count_exactly(runs):
    for (n, sp, _), ranks in runs.items():
        rows = megatron.collectives(n, sp)
        want = megatron.comm_table(rows, megatron.STEP_PARTS)
        step = megatron.comm_table(rows, ("optimizer step",))
        for r in ranks:
            assert {k: {"calls": v["calls"], "elements": v["elements"]} for k, v in r.comm.items()} == want, (n, sp)
            assert all(v["bytes"] == 4 * v["elements"] for v in r.comm.values())  # fp32 on the wire
            assert r.comm_debug == {k: v["calls"] for k, v in r.comm.items()}  # torch's CommDebugMode agrees
            assert {k: {"calls": v["calls"], "elements": v["elements"]} for k, v in r.comm_step.items()} == step


def test_the_layers_issue_what_the_papers_count_and_torch_adds_the_rest(runs):
    for n in (2, 4):
        tp, sp = runs[(n, False, 0.0)][0].comm, runs[(n, True, 0.0)][0].comm
        # Megatron: 4 all-reduces of b*s*h per layer; + wte (forward), lm_head (backward), 3 of b*s in the loss
        assert megatron.comm_table(megatron.collectives(n), ("layers",)) == {
            "all_reduce": {"calls": 4 * L, "elements": 4 * L * BSH}}
        assert tp == {"all_reduce": {"calls": 4 * L + 2 + 3, "elements": (4 * L + 2) * BSH + 3 * BS,
                                     "bytes": 4 * ((4 * L + 2) * BSH + 3 * BS)}}
        # SP: each all-reduce becomes an all-gather and a reduce-scatter of b*s*h (4 + 4 per layer), plus a
        # re-gather of the 2 saved shards per layer; outside: wte, wpe (s*h), lm_head and the loss
        assert sp["reduce_scatter"]["calls"] == 4 * L + 2 and sp["reduce_scatter"]["elements"] == (4 * L + 2) * BSH
        assert sp["all_gather"]["calls"] == 4 * L + 2 * L + 4
        assert sp["all_gather"]["elements"] == (4 * L + 2 * L + 3) * BSH + S * H
        assert sp["all_reduce"] == {"calls": 3, "elements": 3 * BS, "bytes": 12 * BS}
        assert runs[(n, True, 0.0)][0].comm_step["all_reduce"]["elements"] == (4 * L + 2) * H  # Partial norm grads
        assert runs[(n, False, 0.0)][0].comm_step == {}


def test_activation_bytes_per_layer_are_korthikantis_formula_plus_layernorm_statistics(runs):
    for (n, sp, dropout), ranks in runs.items():
        act = megatron.activation_bytes(n, sp, {"dropout": dropout})
        stats = 2 * 2 * 4 * BS // (n if sp else 1)  # mean and 1/std of two LayerNorms, fp32
        for r in ranks:
            assert r.activation_bytes == [act["exact"]] * L, (n, sp, dropout)
            assert act["exact"] - act["formula"] == stats
            assert abs(r.activation_bytes[0] / act["formula"] - 1) < 0.02
            shard = n if sp else 1  # under SP the QKV input is kept as 1/t and re-gathered in backward
            assert r.activation_roles["attn.c_attn"] == 4 * BSH // shard
            assert r.activation_roles["ln_1"] == 4 * BSH // shard + stats // 2
            assert r.activation_roles["attn.core.softmax"] == 4 * A * S * S * B // n
            if dropout:
                assert r.activation_roles["mlp.drop"] == BSH // shard  # 1-byte masks
                assert r.activation_roles["attn.core.attn_drop"] == A * S * S * B // n


def test_compare_rows_measured_equal_predicted(runs):
    for ranks in runs.values():
        rows = megatron.compare(ranks)
        assert rows and [row for row in rows if row.measured != row.predicted] == []
        assert any(row.paper for row in rows if row.name.startswith("activation"))


def test_bad_input_names_the_field_and_the_allowed_values():
    with pytest.raises(LabkitError, match=r"tp must divide n_head=4: allowed 1, 2, 4 \(got 3\)"):
        megatron.run_tp(3)
    with pytest.raises(LabkitError, match=r"tp must divide ffn=66: allowed 1, 2, 3, 6, 11, 22, 33, 66 \(got 4\)"):
        megatron.run_tp(4, model={"ffn": 66})
    with pytest.raises(LabkitError, match=r"tp must be one of 2 \(got 4\)"):
        megatron.run_tp(2, tp=4)
    with pytest.raises(LabkitError, match=r"tp must divide seq_len=66"):
        megatron.run_tp(4, sp=True, model={"seq_len": 66})
    with pytest.raises(LabkitError, match=r"tp must divide vocab_size=66"):
        megatron.collectives(4, model={"vocab_size": 66})
    with pytest.raises(LabkitError, match="world_size must be a positive integer"):
        megatron.run_tp(0)


def test_sequence_parallel_runs_under_torchrun_on_loopback(reference, torchrun):
    result = torchrun("labkit.intra_layer.megatron", "--sp", "--steps", "2")
    assert result["tp"] == 2 and result["sp"] is True and result["rank"] == 0
    assert result["param_bytes"] == megatron.param_bytes(2)
    assert result["activation_bytes"] == [megatron.activation_bytes(2, True)["exact"]] * L
    assert result["losses"] == pytest.approx(reference["losses"], rel=1e-5)
