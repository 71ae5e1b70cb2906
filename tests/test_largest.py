"""The largest model that fits: ZeRO's Table 2 reproduced row by row, and the answer's properties."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from labkit.errors import LabkitError
from labkit.hardware import gpu
from labkit.predict.conventions import StateSetup, model_states
from labkit.predict.largest import largest_params, table2_text, zero_table2_reproduced

ROWS = zero_table2_reproduced()


@pytest.mark.parametrize("row", ROWS, ids=lambda r: f"mp {r.mp}")
def test_zero_table2_every_row(row):
    """ZeRO (SC 2020) Table 2 under its own conventions: 16 B/param, 32 GB = 32e9 bytes, dp 64, model states only."""
    base, s1, s2, s3 = row.computed
    pub = row.published
    assert base == pytest.approx(pub[0], rel=1e-9)  # 32e9 / 16 x mp: exact
    # stages 1 and 2 are printed as mp x the rounded 64-GPU figure (7.6 bn, 14.4 bn)
    assert pub[1] == pytest.approx(row.mp * round(ROWS[0].computed[1] / 1e9, 1) * 1e9)
    assert pub[2] == pytest.approx(row.mp * round(ROWS[0].computed[2] / 1e9, 1) * 1e9)
    assert s1 == pytest.approx(pub[1], rel=0.006) and s2 == pytest.approx(pub[2], rel=0.006)
    assert s3 == pytest.approx(128e9 * row.mp, rel=1e-9)  # printed 128B, 256B, 0.5T, 1T, 2T: T = 1,024 bn
    assert s3 == pytest.approx(pub[3], rel=0.025)
    assert round(s1 / 1e9, 1) == round(pub[1] / 1e9, 1) or row.mp > 1


def test_table2_reads_the_nominal_capacity():
    assert gpu("V100-32GB").memory_nominal_bytes == 32e9 < gpu("V100-32GB").memory_bytes
    text = table2_text(ROWS)
    assert "7.6 bn (7.6 bn)" in text and "14.4 bn (14.4 bn)" in text and "128.0 bn (128.0 bn)" in text
    with pytest.raises(LabkitError, match="device must be a 32 GB GPU"):
        zero_table2_reproduced("A100-80GB")


def test_unbounded_and_empty():
    both = largest_params(80e9, 3, 8, offload_optimizer="cpu", offload_param="cpu", largest_layer=10**6)
    assert math.isinf(both.params) and both.fixed_bytes == 4e6
    assert largest_params(1e6, 3, 8, convention="deepspeed", largest_layer=10**6).params == 0
    with pytest.raises(LabkitError, match="capacity_bytes must be a positive number"):
        largest_params(0.0)


@settings(max_examples=80, deadline=None)
@given(cap=st.integers(10**9, 10**12), stage=st.integers(0, 3), k=st.integers(0, 12), j=st.integers(0, 6),
       conv=st.sampled_from(["zero", "deepspeed"]), layer=st.integers(1, 10**8))
def test_largest_is_the_last_that_fits(cap, stage, k, j, conv, layer):
    """Powers of two keep every byte count exact in floating point, so "fits" and "does not" are sharp."""
    dp, mp = 2**k, 2**j
    p = int(largest_params(cap, stage, dp, mp, conv, largest_layer=layer).params)
    total = [model_states(StateSetup(q, stage, dp, mp, largest_layer=layer), conv).total for q in (max(p, 1), p + 1)]
    assert (p == 0 or total[0] <= cap) and total[1] > cap


@settings(max_examples=60, deadline=None)
@given(cap=st.floats(1e9, 1e12), dp=st.integers(1, 4096), mp=st.integers(1, 64))
def test_more_sharding_fits_more(cap, dp, mp):
    by_stage = [largest_params(cap, s, dp, mp).params for s in range(4)]
    assert by_stage == sorted(by_stage)
    assert largest_params(cap, 3, dp, mp, "deepspeed").params <= by_stage[3]  # 18 > 16 B/param
    assert largest_params(cap, 2, 2 * dp, mp).params >= by_stage[2]
