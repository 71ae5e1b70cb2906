"""The recorded trace is the real step's, and the replay keeps its promises (MIN <= LRU, bytes conserved)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from labkit.errors import LabkitError
from labkit.future.hierarchy import Hierarchy, compare, record_trace, replay, scaled
from labkit.measure import measure_flops, measure_step
from labkit.rig.data import vocab_size
from labkit.rig.model import GPTConfig
from labkit.rig.train import TrainConfig, Trainer


def _trainer() -> Trainer:
    return Trainer(TrainConfig(model=GPTConfig(vocab_size=vocab_size(), seq_len=16, n_layer=2, d_model=32),
                               batch_size=2))


@pytest.fixture(scope="module")
def trace():
    tr = _trainer()
    tr.step()
    return record_trace(tr)


def test_trace_matches_measured_step(trace):
    tr = _trainer()
    tr.step()
    assert record_trace(tr) == trace  # deterministic, and the step after gives the same trace
    tr2 = _trainer()
    tr2.step()
    mem = measure_step(tr2)
    assert trace.bytes_of("activation") == mem.activations
    assert trace.bytes_of("weight") == mem.parameters
    assert sum(op.flops for op in trace.ops) == measure_flops(tr2).total
    created = [b for op in trace.ops for b in op.writes]
    assert sorted(created) == [i for i, b in enumerate(trace.blocks) if b.kind == "activation"]
    first_backward = next(k for k, op in enumerate(trace.ops) if op.phase == "backward")
    assert all(op.phase == "backward" for op in trace.ops[first_backward:])
    embed_backward = [op for op in trace.ops if op.phase == "backward" and op.module == "wte"]
    assert not embed_backward  # an embedding's backward reads no weight and saves only the batch


def test_enough_capacity_hits_everything(trace):
    for r in compare(trace, scaled(trace, 1.0, 1.0)):
        assert r.misses == 0 and r.stall_s == 0.0
        assert r.tiers[0].hit_rate == 1.0
        assert all(b == 0 for _, b in r.link_bytes)


def test_pressure_trace_aware_wins(trace):
    lru, aware = compare(trace, scaled(trace, 0.3, 0.3))
    assert lru.misses > 0 and aware.misses < lru.misses
    assert aware.stall_s < lru.stall_s
    assert lru.compute_s == pytest.approx(aware.compute_s, rel=1e-9)


@settings(max_examples=25, deadline=None)
@given(hbm=st.floats(0.01, 1.2), dram=st.floats(0.01, 1.2), page=st.sampled_from([256, 1024, 4096]),
       ahead=st.integers(1, 8))
def test_min_never_misses_more_and_bytes_are_conserved(trace, hbm, dram, page, ahead):
    ws = trace.working_set
    h = Hierarchy(max(round(ws * hbm), page), max(round(ws * dram), page), page)
    lru, aware = replay(trace, h, "lru"), replay(trace, h, "trace-aware", ahead)
    assert aware.misses <= lru.misses
    for r in (lru, aware):
        hbm_row, dram_row, ssd_row = r.tiers
        assert hbm_row.hits + dram_row.hits + ssd_row.hits == r.reads
        assert r.bytes_on("pcie h2d") == dram_row.hit_bytes + ssd_row.hit_bytes
        assert r.bytes_on("nvme read") == ssd_row.hit_bytes
        assert sum(t.hit_bytes for t in r.tiers) == sum(
            trace.blocks[b].nbytes for op in trace.ops for b in op.reads)
        assert r.bytes_on("nvme write") <= r.bytes_on("pcie d2h")  # only spilled activations reach the SSD
        assert r.peak_hbm_pages <= h.pages("HBM")
        assert r.stall_s >= 0 and r.makespan_s >= r.compute_s + r.stall_s - 1e-15


@pytest.mark.parametrize("kw, field", [
    ({"hbm_bytes": 0, "dram_bytes": 4096}, "hbm_bytes"),
    ({"hbm_bytes": 100, "dram_bytes": 4096}, "hbm_bytes"),
    ({"hbm_bytes": 4096, "dram_bytes": -1}, "dram_bytes"),
    ({"hbm_bytes": 4096, "dram_bytes": 4096, "gpu": "TPU"}, "gpu"),
    ({"hbm_bytes": 4096, "dram_bytes": 4096, "ssd": "DDR5-4800"}, "ssd"),
])
def test_bad_hierarchy_names_field(kw, field):
    with pytest.raises(LabkitError, match=field):
        Hierarchy(**kw)


def test_bad_replay_input_names_field(trace):
    h = scaled(trace, 0.5)
    with pytest.raises(LabkitError, match="policy"):
        replay(trace, h, "fifo")
    with pytest.raises(LabkitError, match="lookahead"):
        replay(trace, h, "trace-aware", 0)
    with pytest.raises(LabkitError, match="hbm_fraction"):
        scaled(trace, -1.0)


def test_ablation_separates_eviction_from_prefetch(trace):
    from labkit.future.hierarchy import POLICIES, ablation

    a = ablation(trace, scaled(trace, 0.5, 0.3))
    assert set(a) == set(POLICIES)
    assert a["min"].misses == a["trace-aware"].misses < a["lru"].misses == a["lru+prefetch"].misses
    assert a["trace-aware"].stall_s <= a["min"].stall_s < a["lru"].stall_s
    assert a["lru+prefetch"].stall_s <= a["lru"].stall_s
