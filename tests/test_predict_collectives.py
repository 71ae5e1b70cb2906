"""One collective-cost model: every path that prices a collective gives the same seconds (issue 23)."""

from __future__ import annotations

import pytest

from labkit.advisor import steptime
from labkit.advisor.costing import Layout
from labkit.hardware import Link, link
from labkit.inter_layer.scale import zero_step_seconds
from labkit.intra_layer import costs
from labkit.predict import collectives as coll

# The issue's two all-reduces: 1.3e9 bf16 gradients over 8 GPUs on NVLink 3 (three copies gave 22.8, 15.2 and
# 15.2 ms), and a latency-bound 1e6-parameter one over 64 GPUs (0.083, 0.014 and 0.076 ms).
CASES = [(1.3e9, 8, "nvlink3"), (1e6, 64, "nvlink3"), (1e6, 64, "ib-hdr"), (1.3e9, 8, "ib-ndr")]


@pytest.mark.parametrize("params, n, name", CASES)
@pytest.mark.parametrize("form", coll.FORMS)
def test_every_path_prices_an_all_reduce_the_same(params: float, n: int, name: str, form: str) -> None:
    wire, nbytes = link(name), 2 * params
    one = coll.all_reduce(nbytes, n, wire, form)
    bw = wire.bandwidth * (coll.BUS_EFFICIENCY[wire.kind] if form == "bus" else 1.0)
    assert one == pytest.approx(2 * (n - 1) * wire.latency_s + 2 * (n - 1) / n * nbytes / bw, rel=1e-12)
    via_costs = costs.Collective("all_reduce", n, int(nbytes)).seconds(wire, form)
    via_scale = zero_step_seconds(params, n, 0, wire, 2, form)
    assert via_costs == pytest.approx(one, rel=1e-12) and via_scale == pytest.approx(one, rel=1e-12)
    if form == coll.DEFAULT_FORM:  # the advisor's data-parallel all-reduce of a whole gradient, ZeRO-0
        _, via_advisor = steptime.dp_seconds(params, Layout(n, 1, 1), 1, wire, 2, 2, 0.0)
        assert via_advisor == pytest.approx(one, rel=1e-12)


def test_the_issues_figures() -> None:
    nv = link("nvlink3")
    assert 1e3 * coll.all_reduce(2.6e9, 8, nv) == pytest.approx(22.76, abs=0.01)  # 2 x 7/8 x 2.6 GB at 200 GB/s
    assert 1e3 * coll.all_reduce(2.6e9, 8, nv, "textbook") == pytest.approx(15.17, abs=0.01)  # at 300 GB/s
    assert 1e3 * coll.all_reduce(2e6, 64, nv) == pytest.approx(0.0827, abs=1e-4)  # 126 latencies of 0.5 us dominate


@pytest.mark.parametrize("kind, k", [("all_reduce", 2), ("broadcast", 2), ("reduce", 2), ("all_gather", 1),
                                     ("reduce_scatter", 1)])
def test_ring_messages_and_halves(kind: str, k: int) -> None:
    wire = Link("test", (), "infiniband", bandwidth=1e9, latency_s=1e-6, source="a round number")
    assert coll.messages(kind, 4) == 3 * k
    assert coll.seconds(kind, 4000, 4, wire, "textbook") == pytest.approx(3 * k * (1e-6 + 1000 / 1e9))
    assert coll.wire_bytes(kind, 4000, 4) == 3 * k * 1000
    assert coll.seconds(kind, 4000, 1, wire) == 0.0 and coll.seconds(kind, 0, 4, wire) == 0.0


@pytest.mark.parametrize("field, call", [("kind", lambda w: coll.seconds("all_to_all", 1, 2, w)),
                                         ("form", lambda w: coll.all_reduce(1, 2, w, "fast"))])
def test_bad_choice_names_the_field(field, call) -> None:
    from labkit.errors import LabkitError
    with pytest.raises(LabkitError, match=f"^{field} must be one of"):
        call(link("nvlink3"))
