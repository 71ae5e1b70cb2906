"""Near-data Adam: measured bytes equal the formula; the paths and the break-even agree."""

from __future__ import annotations

import pytest

from labkit.errors import LabkitError
from labkit.future.near_data import adam_bytes_touched, adam_paths, break_even_bandwidth, measure_adam, sweep
from labkit.rig.data import vocab_size
from labkit.rig.model import GPTConfig
from labkit.rig.train import TrainConfig, Trainer


@pytest.mark.parametrize("precision, grad, near", [("fp32", 4, 8), ("bf16-mixed", 2, 4)])
def test_measured_adam_step_equals_formula(precision, grad, near):
    cfg = TrainConfig(model=GPTConfig(vocab_size=vocab_size(), seq_len=16, n_layer=2, d_model=32), batch_size=2,
                      precision=precision)
    m = measure_adam(Trainer(cfg))
    assert m.state_bytes == m.formula_state_bytes == 12 * m.params
    assert m.grad_bytes == grad * m.params
    assert m.touched_bytes == m.formula_touched_bytes == 28 * m.params
    assert m.standard_link_bytes == 24 * m.params
    assert m.near_link_bytes == near * m.params
    assert all(measured == formula for _, measured, formula in m.rows())


def test_paths_bytes_and_totals():
    p = 10**9
    for where in ("dram", "ssd"):
        r = adam_paths(p, where)
        assert r.standard.link_bytes == 24 * p and r.near.link_bytes == 4 * p
        assert r.standard.seconds == pytest.approx(sum(leg.seconds for leg in r.standard.legs))
        assert r.near.joules > 0 and r.standard.joules > 0
        steps = [leg for path in (r.standard, r.near) for leg in path.legs if leg.what == "step"]
        assert all(leg.nbytes == adam_bytes_touched(p) == 28 * p for leg in steps)
    assert adam_paths(p, "dram").winner == "near-data"  # PCIe is far slower than HBM over DRAM


@pytest.mark.parametrize("where", ["dram", "ssd"])
def test_break_even_separates_the_sweep(where):
    b = break_even_bandwidth(where)
    rows = sweep(10**9, where, [b / 2, b * 2])
    assert [r[3] for r in rows] == ["near-data", "standard"]
    at = adam_paths(10**9, where, link_bandwidth=b)
    assert at.standard.seconds == pytest.approx(at.near.seconds, rel=1e-9)


def test_faster_ssd_engine_helps():
    slow = adam_paths(10**9, "ssd")
    fast = adam_paths(10**9, "ssd", ssd_internal_bandwidth=60e9)
    assert fast.near.seconds < slow.near.seconds and fast.standard == slow.standard


@pytest.mark.parametrize("kw, field", [
    ({"params": 0}, "params"), ({"states_at": "hbm"}, "states_at"), ({"link_bandwidth": -1.0}, "link_bandwidth"),
    ({"ssd_internal_bandwidth": 0.0}, "ssd_internal_bandwidth"), ({"gpu": "TPU"}, "gpu"),
    ({"state_bytes": 0}, "state_bytes"),
])
def test_bad_input_names_field(kw, field):
    with pytest.raises(LabkitError, match=field):
        adam_paths(**{"params": 1000, **kw})


def test_flash_writes_cost_write_bandwidth_and_energy():
    from labkit import hardware
    from labkit.future.near_data import ssd_j_per_bit

    drive = hardware.tier("NVMe-PCIe4")
    r = adam_paths(10**9, "ssd")
    out = next(leg for leg in r.standard.legs if leg.what == "move states out")
    states = 12 * 10**9
    slowest = min(drive.write_bandwidth, hardware.tier("DDR5-4800").read_bandwidth, 64e9)
    assert out.seconds == pytest.approx(states / slowest, rel=0.01)
    assert ssd_j_per_bit(drive, "write") == pytest.approx(drive.power_watts / (8 * drive.write_bandwidth))
    assert ssd_j_per_bit(drive, "write") > ssd_j_per_bit(drive, "read")  # it writes slower at the same power
    grads_in = next(leg for leg in r.near.legs if leg.what == "move gradients")
    assert "write" in grads_in.place
    with pytest.raises(LabkitError, match="direction must be one of read, write"):
        ssd_j_per_bit(drive, "erase")
