"""The budgeted device and the saved-tensor trace, on real steps of the tiny GPT."""

import pytest

from labkit.errors import LabkitError
from labkit.hardware import gpu
from labkit.measure import measure_step
from labkit.offload.budget import DeviceOutOfMemory, budgeted_step, model_state_bytes, scaled_capacity
from labkit.offload.trace import prefetch_plan, repeats, trace_iterations, trace_step
from labkit.offload.vdnn import Offloader, offloaded_step
from labkit.rig.model import GPTConfig
from labkit.rig.train import TrainConfig, Trainer

CFG = TrainConfig(model=GPTConfig(vocab_size=35, seq_len=32, n_layer=2, n_head=4, d_model=32), batch_size=4)


def test_peak_is_model_states_plus_every_saved_storage():
    trace = trace_step(Trainer(CFG))
    t = Trainer(CFG)
    counter = budgeted_step(t, capacity=None)
    assert counter.states == model_state_bytes(t.model) == 16 * sum(p.numel() for p in t.model.parameters())
    assert counter.peak == counter.states + trace.total_bytes
    assert trace.total_bytes == measure_step(Trainer(CFG)).activations
    assert counter.activations == 0  # everything released after backward


@pytest.mark.parametrize("n", [0, 7, 20])
def test_out_of_memory_names_the_module_that_did_not_fit(n):
    trace = trace_step(Trainer(CFG))
    t = Trainer(CFG)
    states = model_state_bytes(t.model)
    e = trace.entries[n]
    capacity = states + sum(x.nbytes for x in trace.entries[:n]) + e.nbytes - 1
    with pytest.raises(DeviceOutOfMemory) as info:
        budgeted_step(t, capacity)
    msg = str(info.value)
    assert repr(e.module or "<root>") in msg and f"{e.nbytes:,} bytes" in msg and f"{capacity:,}" in msg
    assert isinstance(info.value, LabkitError)
    assert all(p.grad is None for p in t.model.parameters())


def test_offloading_makes_it_fit():
    trace = trace_step(Trainer(CFG))
    t = Trainer(CFG)
    capacity = model_state_bytes(t.model) + trace.total_bytes // 2
    with pytest.raises(DeviceOutOfMemory):
        budgeted_step(Trainer(CFG), capacity)
    with Offloader(t.model, "dram", trace=trace, capacity=capacity) as off:
        offloaded_step(t, off)
    assert off.peak <= capacity


def test_scaled_capacity_keeps_the_real_ratio():
    tiny = 1_000_000
    cap = scaled_capacity("A100-80GB", 4e9, tiny)
    assert cap == round(gpu("A100-80GB").memory_bytes * tiny / (16 * 4e9))
    with pytest.raises(LabkitError, match="real_params"):
        scaled_capacity("A100-80GB", -1, tiny)


def test_trace_repeats_and_records_lifetimes():
    traces = trace_iterations(Trainer(CFG), steps=3)
    assert repeats(traces)
    first = traces[0]
    assert [e.index for e in first.entries] == list(range(len(first.entries)))
    for e in first.entries:
        assert e.saves >= 1 and e.uses and e.released is not None
        assert e.packed <= first.forward_end < e.first_use <= e.released
    assert sorted(first.fetch_order()) == list(range(len(first.entries)))
    assert {e.module_type for e in first.entries} >= {"Linear", "MatMul", "LayerNorm", "Softmax"}


def test_prefetch_plan_reads_ahead_in_backward_order():
    trace = trace_step(Trainer(CFG))
    plan = prefetch_plan(trace, lookahead=2)
    assert [p.entry for p in plan] == trace.fetch_order()
    assert all(0 <= p.issue_at <= p.needed_at for p in plan)
    assert [p.needed_at for p in plan] == sorted(p.needed_at for p in plan)
    assert plan[2].issue_at == plan[0].needed_at
    with pytest.raises(LabkitError, match="lookahead"):
        prefetch_plan(trace, lookahead=0)
