"""Where a tensor-parallel group's traffic goes: NVLink inside the domain, the inter-node link beyond."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from labkit import hardware
from labkit.errors import LabkitError
from labkit.intra_layer.placement import place

A100, NVL, IB, PCIE = (hardware.gpu("A100-80GB"), hardware.link("nvlink3"), hardware.link("ib-hdr"),
                       hardware.link("pcie4-x16"))


@given(st.integers(1, 1024))
def test_nvlink_only_inside_the_domain(p):
    where = place(p, NVL, A100, IB)
    assert where.used == (NVL if p <= A100.nvlink_domain_gpus else IB)
    assert where.spills == (p > 8)


def test_the_a100_domain_is_eight_gpus_and_other_links_are_taken_as_asked():
    assert place(8, NVL, A100, IB).used is NVL and place(16, NVL, A100, IB).label == "ib-hdr (>8 GPUs)"
    assert place(64, IB, A100, IB).used is IB and place(64, PCIE, A100, IB).used is PCIE


def test_a_gpu_without_nvlink_has_a_domain_of_one():
    assert place(2, NVL, hardware.gpu("RTX-4090"), IB).used is IB


def test_bad_world_size_names_the_field():
    with pytest.raises(LabkitError, match="world_size"):
        place(0, NVL, A100, IB)
