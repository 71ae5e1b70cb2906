"""The real vDNN micro-run beside its replay in the simulator of this machine: bytes exact, peaks close.

Seconds are measured and simulated too, but never asserted (this machine is shared; the notebook shows
them marked as ignored).
"""

from __future__ import annotations

import math

import pytest

from labkit.errors import LabkitError
from labkit.offload import calibrate


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("calibrate")
    return calibrate.calibrate(repeats=1, root=str(root), disk_bytes=4 * 2**20), root


def test_bytes_measured_equal_bytes_simulated_exactly(run):
    cal, _ = run
    saved = sum(o.act_bytes for o in cal.ops)
    assert [r.store for r in cal.rows] == ["dram", "disk"]
    for r in cal.rows:
        assert r.measured_bytes == r.simulated_bytes == 2 * saved, r.store  # every storage out and back


def test_one_op_per_saved_storage_with_the_layers_time(run):
    cal, _ = run
    layers = {o.name.split("#")[0] for o in cal.ops}
    assert {"h.0", "h.1", "head"} <= layers
    assert all(o.fwd_s > 0 and o.bwd_s > 0 for o in cal.ops)
    assert cal.copy_bps > 0 and cal.copy_s >= 0 and cal.file_s >= 0 and cal.disk.read_bps > 0


def test_peaks_agree_within_the_prefetch_window(run):
    """Both hold the model states plus a few storages, far below all activations at once."""
    cal, _ = run
    sizes = [o.act_bytes for o in cal.ops]
    for r in cal.rows:
        assert abs(r.measured_peak_bytes - r.simulated_peak_bytes) <= 2 * max(sizes), r.store
        for peak in (r.measured_peak_bytes, r.simulated_peak_bytes):
            assert cal.states_bytes + max(sizes) <= peak < cal.states_bytes + 0.5 * sum(sizes)
        assert math.isfinite(r.measured_added_s) and math.isfinite(r.simulated_added_s)
        low, high = r.measured_added_range_s
        assert low <= r.measured_added_s <= high and r.pairs == 1  # the median lies within the pairs' range
    assert len(cal.table()) == 2 and "added ms measured" in cal.table()[0]


def test_no_offload_file_is_left_behind(run):
    _, root = run
    assert list(root.iterdir()) == []


@pytest.mark.parametrize("kw, message", [({"stores": ("tape",)}, "store must be one of"),
                                         ({"repeats": 0}, "repeats must be a positive integer")])
def test_bad_input_names_the_field(kw, message):
    with pytest.raises(LabkitError, match=message):
        calibrate.calibrate(**kw)


def test_software_cost_is_measured_and_added_to_the_replay(run):
    cal, _ = run
    sw = cal.software
    assert sw is not None and sw.tensors == sum(o.act_bytes > 0 for o in cal.ops)
    assert sw.forward_s >= 0 and sw.backward_s >= 0
    for r in cal.rows:
        assert r.calibrated_added_s >= r.simulated_added_s - 1e-12  # a non-negative term on compute


def test_null_offloader_moves_no_bytes_and_keeps_the_gradients():
    import torch

    from labkit.offload.overhead import NullOffloader
    from labkit.offload.trace import trace_step
    from labkit.offload.vdnn import offloaded_forward_backward
    from labkit.rig.train import TrainConfig, Trainer, seed_everything

    cfg = TrainConfig(batch_size=2)
    plain, null = Trainer(cfg), Trainer(cfg)
    trace = trace_step(Trainer(cfg), 0)
    x, y = plain.data(0)
    plain.model.train()
    seed_everything(1)  # the same dropout masks for both runs
    _, loss = plain.model(x, y)
    loss.backward()
    seed_everything(1)
    with NullOffloader(null.model, "dram", trace=trace) as off:
        offloaded_forward_backward(null, off, 0)
        assert off.stats.tensors_offloaded == len(trace.entries) and off.stats.bytes_read > 0
    for a, b in zip(plain.model.parameters(), null.model.parameters(), strict=True):
        assert torch.equal(a.grad, b.grad)
