"""PipeDream's asynchronous 1F1B on real local ranks: weight versions, their bytes, stashing, loss.

Two process groups (p = 2 and p = 4) each train every stash mode once; the tests read their reports.
"""

from __future__ import annotations

import pytest
import torch

from labkit.errors import LabkitError
from labkit.inter_layer import pipedream as pd
from labkit.inter_layer import pipedream_runs as pdr
from labkit.rig.model import count_parameters
from labkit.sim import schedule

MINIBATCHES = {2: 16, 4: 32}


@pytest.fixture(scope="module")
def runs() -> dict[int, dict[str, list[pd.StageReport]]]:
    return {p: pdr.compare_stash_modes(p, m, verify=True) for p, m in MINIBATCHES.items()}


@pytest.mark.parametrize("p", [2, 4])
def test_weight_versions_per_stage(runs, p):
    """PipeDream stashes one version per in-flight mini-batch: p - r on stage r; 2BW two at most; none one."""
    r = runs[p]
    assert [s.max_versions for s in r["pipedream"]] == [p - rank for rank in range(p)]
    assert [s.max_versions for s in r["2bw"]] == [2] * (p - 1) + [1]  # the last stage has one in flight
    assert [s.max_versions for s in r["none"]] == [1] * p


@pytest.mark.parametrize("p", [2, 4])
def test_stash_bytes_are_versions_times_stage_bytes(runs, p):
    """Counted by storage, the stash is exactly versions x the stage's parameter bytes (fp32)."""
    cfg = pd.model_config()
    whole = count_parameters(pd.build_stage(cfg, 0, 0, 1))
    for mode, stages in runs[p].items():
        assert sum(s.stage_params for s in stages) == whole, mode
        for s in stages:
            assert s.stage_param_bytes == 4 * s.stage_params
            assert s.max_stash_bytes == s.max_versions * s.stage_param_bytes, (mode, s.rank)


@pytest.mark.parametrize("p", [2, 4])
def test_stashing_makes_backward_use_the_forward_weights(runs, p):
    """Checksums of the weights seen by forward and backward of each mini-batch, and an isolation re-run."""
    for mode in ("pipedream", "2bw"):
        for s in runs[p][mode]:
            assert s.forward_checksums == s.backward_checksums, (mode, s.rank)
            assert s.isolation_max_diff == [0.0] * MINIBATCHES[p], (mode, s.rank)  # bit-identical gradients
            assert s.grad_error == [0.0] * MINIBATCHES[p], (mode, s.rank)
    none = runs[p]["none"]
    for s in none[:-1]:  # every stage with mini-batches in flight sees updated weights in backward
        assert any(f != b for f, b in zip(s.forward_checksums, s.backward_checksums, strict=True)), s.rank
        assert max(s.isolation_max_diff) > 0.0 and max(s.grad_error) > 0.0, s.rank
    assert none[-1].forward_checksums == none[-1].backward_checksums  # the last stage: B right after F
    assert [max(s.delay) for s in runs[p]["pipedream"]] == [p - 1 - rank for rank in range(p)]


@pytest.mark.parametrize("p", [2, 4])
def test_order_is_pipedream_1f1b(runs, p):
    for s in runs[p]["pipedream"]:
        assert s.order == [str(a) for a in schedule("1f1b", p, MINIBATCHES[p])[s.rank]]
        assert s.order[: p - s.rank] == [f"{s.rank}F{i}" for i in range(p - s.rank)]  # p - r admitted
        assert s.updates == MINIBATCHES[p]  # one update per backward, no flush
    assert [s.updates for s in runs[p]["2bw"]] == [MINIBATCHES[p] // p] * p


def test_loss_falls_beside_synchronous_1f1b(runs):
    """Staleness changes the curve, not whether it learns: the async loss falls, ending above the sync one, near it."""
    m = MINIBATCHES[4]
    sync = pdr.synchronous_1f1b_losses(m)
    assert len(sync) == m and sync[-1] < sync[0]
    tail_sync = sum(sync[-4:]) / 4
    for mode in ("pipedream", "2bw", "none"):
        losses = runs[4][mode][-1].losses
        assert len(losses) == m and all(s.losses == [] for s in runs[4][mode][:-1])
        assert losses[0] == pytest.approx(sync[0], rel=1e-5)  # mini-batch 0 runs on the initial weights
        assert losses[1:] != pytest.approx(sync[1:], rel=1e-5)  # later ones on stale or newer versions
        tail = sum(losses[-4:]) / 4
        assert tail < losses[0] - 0.4, mode  # measured: 3.59 -> about 3.0
        assert tail_sync < tail < 1.3 * tail_sync, mode  # measured: pipedream 2.96 beside the synchronous 2.38


def test_repoint_carries_adamw_state():
    """Copy on write must not reset AdamW's moments: a re-pointed optimizer steps like the original."""
    torch.manual_seed(0)
    w, g = torch.randn(5), torch.randn(5)
    a, b = w.clone().requires_grad_(), w.clone().requires_grad_()
    opt_a, opt_b = (torch.optim.AdamW([t], lr=0.1, foreach=False) for t in (a, b))
    for step in range(3):
        for t, opt in ((a, opt_a), (b, opt_b)):
            t.grad = g * (step + 1)
            opt.step()
        if step == 0:
            fresh = b.detach().clone().requires_grad_()
            pd.repoint(opt_b, [b], [fresh])
            old_b, b = b.detach().clone(), fresh
            assert torch.equal(old_b, b)
    assert torch.equal(a, b)


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"p": 2, "minibatches": 4, "stash": "gpipe"}, ["stash", "pipedream, 2bw, none", "gpipe"]),
        ({"p": 3, "minibatches": 4}, ["p must divide n_layer=4", "1, 2, 4", "got 3"]),
        ({"p": 4, "minibatches": 3}, ["minibatches", ">= p=4", "got 3"]),
        ({"p": 2, "minibatches": 0}, ["minibatches", "positive integer"]),
        ({"p": 4, "minibatches": 8, "stash": "2bw", "every": 2}, ["every", ">= p=4", "got 2"]),
        ({"p": 2, "minibatches": 4, "model": {"dropout": 0.1}}, ["dropout", "0.0"]),
        ({"p": 2, "minibatches": 4, "model": {"layers": 2}}, ["unknown field", "layers", "n_layer"]),
    ],
)
def test_bad_input_names_the_field(kwargs, words):
    with pytest.raises(LabkitError) as err:
        pdr.run_pipedream(**kwargs)  # raises before any process starts
    for word in words:
        assert word in str(err.value)


def test_gradient_error_grows_with_the_learning_rate():
    """Without stashing the gradient is off by more when the weights move more between F and B."""
    out = pdr.gradient_errors(2, 8, (1e-3, 3e-2), ("pipedream", "none"))
    assert set(out) == {(1e-3, "pipedream"), (1e-3, "none"), (3e-2, "pipedream"), (3e-2, "none")}
    assert all(max(s.grad_error) == 0.0 for lr in (1e-3, 3e-2) for s in out[lr, "pipedream"])
    low, high = pdr.error_summary(out[1e-3, "none"]), pdr.error_summary(out[3e-2, "none"])
    assert 0.0 < low[0][0] < high[0][0] and low[-1] == high[-1] == (0.0, 0.0)


def test_gradient_errors_refuse_bad_input():
    with pytest.raises(LabkitError, match="lrs and modes"):
        pdr.gradient_errors(2, 8, ())
    with pytest.raises(LabkitError, match="lr"):
        pdr.gradient_errors(2, 8, (-1.0,))
    with pytest.raises(LabkitError, match="stash"):
        pdr.gradient_errors(2, 8, (1e-3,), ("nope",))
