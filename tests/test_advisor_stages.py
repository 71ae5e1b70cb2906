"""Uneven pipeline stages priced exactly as given (issue 21): Megatron's first/last-stage layer counts."""

from __future__ import annotations

import pytest

from labkit.advisor import costing, search, stages
from labkit.advisor.costing import Layout
from labkit.errors import LabkitError
from labkit.predict import compute
from labkit.shapes import ModelShape


@pytest.mark.parametrize("layers, pp, end, middle", [(70, 12, 5, 6), (126, 16, 7, 8)])
def test_uneven_stages_are_priced_exactly_as_given(layers: int, pp: int, end: int, middle: int) -> None:
    shape = ModelShape(f"gpt-{layers}", layers, 8192, 64, 32000, 4096)
    lay = Layout(1, 8, pp, 1, 0, "full", first_stage_layers=end, last_stage_layers=end)
    assert lay.stage_layers(layers) == (end, *(middle,) * (pp - 2), end)
    mc = costing.machine("H100-SXM", 8 * pp)
    plan = search.evaluate(shape, 4096, 64, lay, mc, priced=True)
    assert plan.step_s > 0 and plan.stage_split == f"{end} + {pp - 2} x {middle} + {end}"
    dev = mc.cluster.device
    per = [compute.stage_seconds(shape, 4096, 1, 8, pp, dev, "bf16", True, True, "full", layers=n, logits=last)
           for n, last in ((end, False), (middle, False), (end, True))]
    slowest = max(sum(k.values()) for k in per)
    assert plan.times["compute"] == pytest.approx(64 * slowest)  # every micro-batch at the slowest stage's pace
    even = search.evaluate(ModelShape("even", middle * pp, 8192, 64, 32000, 4096), 4096, 64, Layout(1, 8, pp, 1, 0,
                           "full"), mc, priced=True)
    assert plan.step_s <= even.step_s  # two lighter stages never slow the step


@pytest.mark.parametrize("args, message", [
    ((96, 5), "pp must divide the 96 layers (one of 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 96), or give "
              "--first-stage-layers and --last-stage-layers (balanced: 18 and 18, 18 + 3 x 20 + 18)"),
    ((70, 12, 5, 4), "middle stages an equal share"),
    ((10, 2, 3, 3), "first_stage_layers + last_stage_layers must equal the 10 layers with pp=2"),
    ((10, 1, 2, 0), "first_stage_layers and last_stage_layers need pp > 1"),
    ((10, 4, 5, 5), "middle stages an equal share of at least one layer"),
])  # fmt: skip
def test_bad_splits_name_the_field(args, message) -> None:
    with pytest.raises(LabkitError) as err:
        stages.split(*args)
    assert message in str(err.value)


@pytest.mark.parametrize("bad", [-1, 1.5, True, "5"])
def test_stage_counts_must_be_whole(bad) -> None:
    with pytest.raises(LabkitError, match="^first_stage_layers must be a positive integer, or 0"):
        Layout(1, 1, 2, first_stage_layers=bad)
