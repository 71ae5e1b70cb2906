"""The analytic counts of 1D/2D/2.5D/3D tensor parallelism: Colossal-AI's tables, exact formulas, clear errors.

No process is started here: ``test_intra_layer_multidim`` checks these counts against real runs.
"""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from labkit.errors import LabkitError
from labkit.hardware import Link, link
from labkit.intra_layer import costs

SIDES = st.integers(1, 5)
DEPTHS = st.integers(1, 4)
MULT = st.integers(1, 3)


def config(mode: str, q: int, d: int, k: int) -> tuple[int, int, int, int, int]:
    """(world_size, depth, batch, hidden, ffn) for a grid of side q: sizes that split evenly, times k."""
    world = {"1d": q, "2d": q * q, "2.5d": d * q * q, "3d": q**3}[mode]
    depth = d if mode == "2.5d" else 1
    unit = world * q  # a multiple of every split of every mode
    return world, depth, unit * k, unit * (k + 1), 4 * unit * (k + 1)


# ---------------------------------------------------------------- the published tables (Colossal-AI docs)


@settings(max_examples=60, deadline=None)
@given(mode=st.sampled_from(costs.MODES), q=SIDES, d=DEPTHS, k=MULT)
def test_memory_per_device_is_the_published_fraction(mode, q, d, k):
    """Parameters 1/P, 1/q^2, 1/q^2, 1/q^3; activations 1, 1/q^2, 1/(d q^2), 1/q^3 (the layer's input)."""
    world, depth, b, h, f = config(mode, q, d, k)
    mine, table = costs.ratios(mode, world, b, h, f, depth), costs.published(mode, world, depth)
    assert mine["parameters"] == table["parameters"]
    assert mine["activations"] == table["activations"]
    expected = {"1d": (Fraction(1, world), Fraction(1)), "2d": (Fraction(1, q * q), Fraction(1, q * q)),
                "2.5d": (Fraction(1, q * q), Fraction(1, d * q * q)), "3d": (Fraction(1, q**3), Fraction(1, q**3))}
    assert (table["parameters"], table["activations"]) == expected[mode]
    # biases are split over the output columns only: 1/P in 1d's column layer, 1/q elsewhere
    assert mine["biases"] == Fraction(1, world if mode == "1d" else q)


@settings(max_examples=30, deadline=None)
@given(p=st.integers(1, 16), k=MULT)
def test_1d_activation_one_is_the_replicated_input(p, k):
    """The column-parallel layer keeps the whole X on every rank; the row-parallel one only its 1/P columns."""
    b, h, f = 3 * k, 5 * k, 4 * p * k
    g = costs.grid("1d", p)
    assert costs.linear(g, b, h, f, layer=0).activation_bytes == b * h * 4
    assert costs.linear(g, b, f, h, layer=1).activation_bytes == b * f // p * 4
    assert costs.linear(g, b, f, h, layer=1).bias_bytes == h * 4  # the row-parallel bias is replicated


@settings(max_examples=40, deadline=None)
@given(mode=st.sampled_from(("1d", "3d")), q=st.integers(1, 8))
def test_1d_and_3d_communication_is_the_published_ring_cost(mode, q):
    """1d: 2(P-1)/P S and 2(P-1) messages; 3d: 6(q-1)/q^3 S and 6(q-1), plus the two gathers done again."""
    world = q if mode == "1d" else q**3
    mine, table = costs.table_comm(mode, world), costs.published(mode, world)
    assert (mine["bandwidth"], mine["latency"]) == (table["bandwidth"], table["latency"])
    extra = (0, 0) if mode == "1d" else (Fraction(2 * (q - 1), q**3), 2 * (q - 1))
    assert (mine["extra_bandwidth"], mine["extra_latency"]) == extra


@settings(max_examples=40, deadline=None)
@given(q=st.integers(2, 6), d=st.integers(2, 4))
def test_2_5d_saves_the_published_share_of_2d_communication(q, d):
    """The table's 2.5D over 2D bandwidth, (d+1)/(2d), and equal latency, both come out of SUMMA's counts."""
    mine_2d, mine = costs.table_comm("2d", q * q), costs.table_comm("2.5d", d * q * q, d)
    table_2d, table = costs.published("2d", q * q), costs.published("2.5d", d * q * q, d)
    assert mine["bandwidth"] / mine_2d["bandwidth"] == table["bandwidth"] / table_2d["bandwidth"]
    assert table["bandwidth"] / table_2d["bandwidth"] == Fraction(d + 1, 2 * d)
    assert mine["latency"] == mine_2d["latency"] and table["latency"] == table_2d["latency"]
    # left out of the table: the all-reduce of dW over the d layers (W is replicated over them)
    assert mine["extra_bandwidth"] == Fraction(2 * (d - 1), d) / (q * q)
    # in units of S per rank: 3 SUMMAs of q broadcasts (or reduces) of an X block and q of a W block
    assert mine_2d["bandwidth"] == Fraction(12 * (q - 1), q * q) and mine_2d["latency"] == 12 * q * (q - 1)
    assert mine["bandwidth"] == Fraction(6 * (q - 1) * (d + 1), d * q * q)
    assert (mine_2d["bandwidth"] == table_2d["bandwidth"]) == (q == 2)  # the tables' 2d unit is not S per rank


# ---------------------------------------------------------------- exact counts


def test_counts_of_the_micro_runs():
    """The figures the 4- and 8-rank runs are checked against (batch 16, hidden 16, ffn 64, fp32)."""
    mlp = {m: costs.cost(m, p, "mlp", 16, 16, 64, d) for m, p, d in
           (("1d", 4, 1), ("2d", 4, 1), ("1d", 8, 1), ("2.5d", 8, 2), ("3d", 8, 1))}
    assert mlp["2d"].weight_bytes == 2 * 8 * 32 * 4 and mlp["2d"].activation_bytes == (8 * 8 + 2 * 8 * 32) * 4
    # 2d, q = 2: per layer q broadcasts of an X block and q of a W block (8x8 and 8x32, then 8x32 and 32x8)
    assert mlp["2d"].table("forward") == {"broadcast": {"calls": 8, "bytes": 2 * (64 + 256 + 256 + 256) * 4}}
    assert mlp["3d"].table("forward") == {"all_gather": {"calls": 4, "bytes": (8 * 8 + 8 * 32 + 8 * 32 + 32 * 8) * 4},
                                          "reduce_scatter": {"calls": 2, "bytes": (8 * 32 + 8 * 8) * 4}}
    assert mlp["1d"].table() == {"all_reduce": {"calls": 2, "bytes": 2 * 16 * 16 * 4}}
    assert [c.what for c in mlp["2.5d"].backward if c.kind == "all_reduce"] == ["dW over depth", "db"] * 2


@pytest.mark.parametrize("mode", costs.MODES)
def test_one_rank_moves_nothing_and_holds_everything(mode):
    c = costs.cost(mode, 1, "mlp", 8, 8, 32)
    assert c.forward == c.backward == ()
    assert c.weight_bytes == 2 * 8 * 32 * 4 and c.bias_bytes == (32 + 8) * 4
    assert c.activation_bytes == (8 * 8 + 2 * 8 * 32) * 4


def test_2_5d_with_one_layer_is_2d_call_for_call():
    assert costs.cost("2.5d", 4, "mlp", 16, 16, 64, 1) == costs.cost("2d", 4, "mlp", 16, 16, 64)


@pytest.mark.parametrize(("kind", "messages"), [("all_gather", 3), ("reduce_scatter", 3), ("all_reduce", 6),
                                                ("broadcast", 6), ("reduce", 6)])
def test_ring_messages_and_time(kind, messages):
    """A collective of n bytes over g ranks: (g - 1) or 2 (g - 1) messages of n/g, each latency + size/bandwidth."""
    wire = Link("test", (), "nvlink", bandwidth=1e9, latency_s=1e-6, source="a round number")
    c = costs.Collective(kind, 4, 4000)
    assert (c.messages, c.message_bytes, c.wire_bytes) == (messages, 1000, messages * 1000)
    assert c.seconds(wire, "textbook") == pytest.approx(messages * (1e-6 + 1000 / 1e9))
    assert c.seconds(wire) == pytest.approx(messages * (1e-6 + 1000 / (1e9 * 2 / 3)))  # NCCL's bus bandwidth


def test_comm_seconds_sums_the_messages_of_the_mlp():
    wire = link("nvlink4")
    c = costs.cost("1d", 2, "mlp", 1024, 512, 2048, e=2)
    by_hand = 2 * 2 * (wire.latency_s + 1024 * 512 * 2 / 2 / wire.bandwidth)  # two all-reduces, 2 messages each
    assert costs.comm_seconds("1d", 2, 1024, 512, 2048, wire, form="textbook") == pytest.approx(by_hand)
    assert c.seconds(wire, "forward", "textbook") == pytest.approx(by_hand / 2)


def test_rank_modes_orders_by_time_and_by_memory_and_says_why_not():
    rows = costs.rank_modes(8, link("nvlink4"), 4096, 4096, 16384)
    ok = [r for r in rows if not r.error]
    assert [r.seconds for r in ok] == sorted(r.seconds for r in ok)
    assert [r.time_rank for r in ok] == list(range(1, len(ok) + 1))
    by_memory = sorted(ok, key=lambda r: r.memory_rank)
    assert [r.held_bytes for r in by_memory] == sorted(r.held_bytes for r in ok)
    assert {r.label for r in ok} == {"1d (P=8)", "2.5d (d=2, q=2)", "3d (q=2)"}
    (bad,) = [r for r in rows if r.error]
    assert bad.mode == "2d" and "square number" in bad.error and bad.time_rank is None


# ---------------------------------------------------------------- bad input


@pytest.mark.parametrize(("mode", "world", "depth", "message"), [
    ("2d", 8, 1, "world_size must be a square number for mode 2d: 1, 4, 9, 16, ... (got 8)"),
    ("3d", 4, 1, "world_size must be a cube number for mode 3d: 1, 8, 27, 64, ... (got 4)"),
    ("2.5d", 6, 2, "world_size must be depth * q**2 with depth=2 for mode 2.5d: 2, 8, 18, 32, ... (got 6)"),
    ("2.5d", 8, 3, "world_size must be depth * q**2 with depth=3 for mode 2.5d: 3, 12, 27, 48, ... (got 8)"),
    ("2d", 4, 2, "depth must be 1 for mode 2d: only 2.5d has layers (got 2)"),
    ("4d", 4, 1, "mode must be one of 1d, 2d, 2.5d, 3d (got '4d')"),
    ("1d", 0, 1, "world_size must be a positive integer (got 0)"),
])
def test_bad_grids_name_the_field_and_the_sizes_allowed(mode, world, depth, message):
    with pytest.raises(LabkitError) as err:
        costs.grid(mode, world, depth)
    assert str(err.value) == message


@pytest.mark.parametrize(("mode", "world", "depth", "sizes", "message"), [
    ("1d", 8, 1, (16, 16, 60), "ffn must be a multiple of 8 for mode 1d (P=8): 8, 16, 24, ... (got 60)"),
    ("2d", 4, 1, (15, 16, 64), "batch must be a multiple of 2 for mode 2d (q=2): 2, 4, 6, ... (got 15)"),
    ("2.5d", 8, 2, (6, 16, 64), "batch must be a multiple of 4 for mode 2.5d (d=2, q=2): 4, 8, 12, ... (got 6)"),
    ("3d", 8, 1, (16, 18, 64), "hidden must be a multiple of 4 for mode 3d (q=2): 4, 8, 12, ... (got 18)"),
    ("3d", 8, 1, (16, 16, -4), "ffn must be a positive integer (got -4)"),
])
def test_sizes_that_do_not_split_evenly_are_refused(mode, world, depth, sizes, message):
    with pytest.raises(LabkitError) as err:
        costs.check(mode, world, *sizes, depth=depth)
    assert str(err.value) == message


def test_unknown_block_and_phase_are_refused():
    with pytest.raises(LabkitError, match="block must be one of linear, mlp"):
        costs.cost("1d", 2, "attention", 4, 4, 4)
    with pytest.raises(LabkitError, match="phase must be one of forward, backward, both"):
        costs.cost("1d", 2, "mlp", 4, 4, 4).table("sideways")
