"""1D, 2D, 2.5D and 3D tensor parallelism on real ranks: results equal one process, bytes equal ``costs`` exactly.

Two process groups carry all the runs, one of 4 ranks (1d, 2d, and 2.5d with d = 1, which is 2d) and
one of 8 (1d, 2.5d with d = 2, q = 2, and 3d with q = 2); each runs every mode, the linear layer and the
MLP block, because starting 8 ranks on 2 cores costs far more than the runs themselves.
"""

from __future__ import annotations

from fractions import Fraction

import pytest
import torch

from labkit.errors import LabkitError
from labkit.intra_layer import costs, multidim

RTOL, ATOL = 1e-5, 1e-6  # fp32; the sums run in a different order than in one process
LINEAR = {"block": "linear", "batch": 32, "hidden": 16, "ffn": 48}  # non-square: rows, in and out all differ
MLP = {"block": "mlp", "batch": 16, "hidden": 16, "ffn": 64, "seed": 1}
GRIDS = {4: (("1d", 1), ("2d", 1), ("2.5d", 1)), 8: (("1d", 1), ("2.5d", 2), ("3d", 1))}


@pytest.fixture(scope="module")
def runs() -> dict[tuple[int, str, int, str], list[dict]]:
    """(world size, mode, depth, block) -> per-rank results."""
    out = {}
    for world, grids in GRIDS.items():
        configs = [{"mode": m, "depth": d, **blk} for m, d in grids for blk in (LINEAR, MLP)]
        for cfg, ranks in zip(configs, multidim.run_modes(world, configs), strict=True):
            out[world, cfg["mode"], cfg["depth"], cfg["block"]] = ranks
    return out


def test_every_mode_computes_what_one_process_computes(runs):
    for key, ranks in runs.items():
        assert len(ranks) == key[0]
        got = multidim.assemble(ranks)  # also checks that replicated blocks are identical on every rank
        r0 = ranks[0]
        want = multidim.reference(**{k: r0[k] for k in ("block", "batch", "hidden", "ffn", "seed")})
        names = ["y", "dx", "dw1", "db1"] + (["dw2", "db2"] if key[3] == "mlp" else [])
        assert sorted(got) == sorted(want) == sorted(names)
        for name in names:
            where = f"{key} {name}"
            torch.testing.assert_close(got[name], want[name], rtol=RTOL, atol=ATOL, msg=lambda m, w=where: f"{w}: {m}")


def test_bytes_held_equal_costs_exactly_on_every_rank(runs):
    for key, ranks in runs.items():
        for r in ranks:
            c = multidim.predicted(r)
            assert (r["weight_bytes"], r["bias_bytes"], r["activation_bytes"]) == (
                c.weight_bytes, c.bias_bytes, c.activation_bytes), (key, r["rank"])


def test_collectives_equal_costs_exactly_call_by_call(runs):
    """Kind, group size and bytes of every collective of forward and of backward, on every rank."""
    for key, ranks in runs.items():
        for r in ranks:
            c = multidim.predicted(r)
            for phase in ("forward", "backward"):
                measured = sorted(costs.Collective(*x) for x in r[phase])
                assert measured == sorted(c.calls(phase)), (key, r["rank"], phase)
            assert all(row.measured == row.predicted for row in multidim.compare([r]))


def test_the_ranks_hold_the_published_fractions(runs):
    """Measured, not predicted: the linear layer's weights and kept input over one device's."""
    for (world, mode, depth, block), ranks in runs.items():
        if block != "linear":
            continue
        table = costs.published(mode, world, depth)
        r = ranks[0]
        assert Fraction(r["weight_bytes"], 16 * 48 * 4) == table["parameters"]
        assert Fraction(r["activation_bytes"], 32 * 16 * 4) == table["activations"]


def test_2_5d_with_one_layer_is_2d(runs):
    for block in ("linear", "mlp"):
        two, flat = runs[4, "2d", 1, block], runs[4, "2.5d", 1, block]
        for a, b in zip(two, flat, strict=True):
            assert a["forward"] == b["forward"] and a["backward"] == b["backward"]
            for name, (where, t) in a["pieces"].items():
                assert b["pieces"][name][0] == where and torch.equal(b["pieces"][name][1], t)


def test_the_micro_runs_move_what_the_tables_show(runs):
    """A few figures by hand (fp32, MLP of batch 16, hidden 16, ffn 64), so a reader can check the tables."""
    one = lambda world, mode, depth=1: runs[world, mode, depth, "mlp"][0]  # noqa: E731
    table = lambda r, phase: costs.comm_table(costs.Collective(*x) for x in r[phase])  # noqa: E731
    assert table(one(8, "1d"), "forward") == {"all_reduce": {"calls": 1, "bytes": 16 * 16 * 4}}
    assert table(one(4, "2d"), "forward") == {"broadcast": {"calls": 8, "bytes": 2 * (64 + 256 + 256 + 256) * 4}}
    assert table(one(8, "3d"), "backward")["all_gather"]["calls"] == 6  # dY, X again, W again, per layer
    assert one(8, "2.5d", 2)["activation_bytes"] == (4 * 8 + 2 * 4 * 32) * 4


@pytest.mark.parametrize(("world", "config", "field"), [
    (8, {"mode": "2d"}, "world_size must be a square number for mode 2d"),
    (4, {"mode": "3d"}, "world_size must be a cube number for mode 3d"),
    (8, {"mode": "2.5d", "depth": 3}, "world_size must be depth * q**2 with depth=3"),
    (8, {"mode": "3d", "batch": 6}, "batch must be a multiple of 4 for mode 3d (q=2)"),
    (4, {"mode": "2d", "hidden": 15}, "hidden must be a multiple of 2 for mode 2d (q=2)"),
    (4, {"mode": "1d", "ffn": 6}, "ffn must be a multiple of 4 for mode 1d (P=4)"),
    (4, {"mode": "2d", "block": "conv"}, "block must be one of linear, mlp"),
])
def test_bad_configurations_fail_before_any_rank_starts(world, config, field):
    with pytest.raises(LabkitError, match=field.replace("*", r"\*").replace("(", r"\(").replace(")", r"\)")):
        multidim.run_modes(world, [{"mode": "1d"}, config])
