"""One measured-beside-predicted record (labkit.measure.record): its error, ratio and the run it names."""

import math

from labkit.measure.compare import Comparison
from labkit.measure.record import Record


def test_error_and_ratio_read_the_prediction_against_the_measurement():
    r = Record("parameters", 200, 150, "bytes", "ZeRO", paper=160, where=(("strategy", "zero3"), ("rank", 1)))
    assert r.error == -0.25 and r.difference == -50 and r.ratio == 200 / 150
    assert r.at("strategy") == "zero3" and r.at("rank") == 1
    assert Record("x", 0, 0).error == 0.0 and Record("x", 0, 0).ratio == 1.0
    assert math.isinf(Record("x", 0, 1).error) and math.isinf(Record("x", 1, 0).ratio)


def test_a_comparison_prints_records_as_its_table():
    c = Comparison("t", (Record("a", 100, 110, note="n"), Record("bb", 50, 50)))
    assert str(c).splitlines() == [
        "t", f"{'':2}  {'measured':>12}  {'predicted':>12}  {'error':>7}",
        f"a   {100:12,.0f}  {110:12,.0f}   10.00%  n", f"bb  {50:12,.0f}  {50:12,.0f}    0.00%",
        "(all in bytes; worst error 10.00%)"]
