"""ZeRO's and DeepSpeed's ways of counting model states: DeepSpeed's published t5-3b figures reproduced."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from labkit.errors import LabkitError
from labkit.predict.conventions import (
    BYTES_PER_PARAM,
    StateSetup,
    deepspeed_zero2_documented_bytes,
    in_units,
    model_states,
)
from labkit.predict.estimate import model_state_bytes

T5_3B, LAYER = 2851 * 10**6, 32 * 10**6  # DeepSpeed's memory.rst: "2851M total params, 32M largest layer params"


def ds(stage: int, opt: str = "none", par: str = "none", **kw) -> tuple[float, float]:
    r = model_states(StateSetup(T5_3B, stage, 8, 1, 8, opt, par, LAYER, **kw), "deepspeed")
    return round(in_units(r.total, "GiB"), 2), round(in_units(r.host_per_node, "GiB"), 2)


def test_deepspeed_t5_3b_zero3_rows():
    """estimate_zero3_model_states_mem_needs_all_cold(2851e6, 32e6, num_gpus_per_node=8, num_nodes=1), zero_init=1."""
    assert ds(3) == (6.09, 1.43)
    assert ds(3, "cpu") == (0.78, 63.72)
    assert ds(3, "cpu", "cpu") == (0.12, 71.69)
    assert ds(3, "cpu", "cpu", zero_init=False)[1] == 127.45  # max(4 x 8 GPUs, 18) x 1.5


def test_deepspeed_t5_3b_zero2():
    assert ds(2, "cpu") == (5.31, 127.45)
    # The documentation's 15.93 without offload is an earlier estimator, 4P + 16P/N; the current one is 2P + 18P/N.
    assert round(in_units(deepspeed_zero2_documented_bytes(T5_3B, 8), "GiB"), 2) == 15.93
    assert ds(2)[0] == 11.28 == round((2 + 18 / 8) * T5_3B / 2**30, 2)
    assert ds(1)[0] == 15.93  # the documented figure is what stage 1 holds: 16-bit gradients whole


def test_bytes_per_parameter_conventions():
    one = StateSetup(10**9, 3, 1, largest_layer=0)
    assert model_states(one, "zero").total == BYTES_PER_PARAM["zero"] * 10**9 == 16e9
    assert model_states(StateSetup(10**9, 3, 1, largest_layer=1), "deepspeed").total == 18e9 + 4
    assert model_states(StateSetup(10**9, 0), "deepspeed").total == 20e9  # stage-1/2 count, nothing partitioned
    assert in_units(2**30, "GiB") == 1 and in_units(1e9, "GB") == 1


@pytest.mark.parametrize("kw, message", [
    ({"zero_stage": 2, "offload_param": "cpu", "offload_optimizer": "cpu"}, "offload_param must be none unless"),
    ({"zero_stage": 0, "offload_optimizer": "cpu"}, "offload_optimizer must be none at zero_stage 0"),
    ({"zero_stage": 3, "offload_param": "cpu"}, "offload_param cpu needs offload_optimizer cpu"),
    ({"offload_optimizer": "nvme", "zero_stage": 2}, "offload_optimizer must be one of none, cpu"),
    ({"largest_layer": -1}, "largest_layer must be a non-negative integer"),
    ({"dp": 0}, "dp must be a positive integer"),
])  # fmt: skip
def test_bad_setups_name_the_field(kw, message):
    with pytest.raises(LabkitError, match=message):
        StateSetup(10**9, **kw)


def test_deepspeed_zero3_needs_the_largest_layer():
    with pytest.raises(LabkitError, match="largest_layer must be given"):
        model_states(StateSetup(10**9, 3, 8), "deepspeed")


@settings(max_examples=100, deadline=None)
@given(p=st.integers(1, 10**12), stage=st.integers(0, 3), dp=st.integers(1, 4096), mp=st.integers(1, 64))
def test_zero_convention_is_the_estimate_module(p, stage, dp, mp):
    """One formula: the zero convention without offload is labkit.predict.estimate's ZeRO count, divided by tp x pp."""
    ours = model_states(StateSetup(p, stage, dp, mp), "zero")
    ref = model_state_bytes(p, "bf16-mixed", stage, dp)
    assert ours.total == pytest.approx(sum(ref.values()) / mp, rel=1e-12) and ours.host_per_node == 0


@settings(max_examples=100, deadline=None)
@given(p=st.integers(1, 10**12), stage=st.integers(1, 3), dp=st.integers(1, 4096), layer=st.integers(1, 10**9),
       off=st.sampled_from([("none", "none"), ("cpu", "none"), ("cpu", "cpu")]))
def test_deepspeed_counts_at_least_zero_and_offload_only_shrinks_the_gpu(p, stage, dp, layer, off):
    if off[1] == "cpu" and stage != 3:
        off = ("cpu", "none")
    setup = StateSetup(p, stage, dp, largest_layer=layer, offload_optimizer=off[0], offload_param=off[1])
    zero, deep = model_states(setup, "zero"), model_states(setup, "deepspeed")
    assert deep.total >= zero.total
    plain = model_states(StateSetup(p, stage, dp, largest_layer=layer), "deepspeed")
    assert deep.total <= plain.total and deep.host_per_node >= 0


def test_published_rows_from_the_references_file():
    from labkit.predict.conventions import deepspeed_t5_3b, published_table

    rows = deepspeed_t5_3b()
    assert len(rows) == 4
    for r in rows:
        assert round(r.gpu_gib, 2) == r.published_gpu_gib and round(r.host_gib, 2) == r.published_host_gib, r.label
    assert "71.69" in published_table(rows)


def test_zero_offload_bytes_come_from_the_offload_model():
    from labkit.predict import offload_model as om

    p, n = 10**9, 8
    two = model_states(StateSetup(p, 2, n, offload_optimizer="cpu", gpus_per_node=8), "zero")
    three = model_states(StateSetup(p, 3, n, offload_optimizer="cpu", gpus_per_node=8), "zero")
    assert two.total == om.ZERO_OFFLOAD.gpu_bytes_per_param(n) * p
    assert three.total == om.ZERO3_CPU_OFFLOAD.gpu_bytes_per_param(n) * p
    assert two.host_per_node == three.host_per_node == om.ZERO_OFFLOAD.host_bytes_per_param * p
