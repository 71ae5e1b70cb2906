"""The step-time model held to every reference set, each under its framework profile (issue 21's acceptance)."""

from __future__ import annotations

import pytest

from labkit.advisor import reference_sets as rs
from labkit.errors import LabkitError
from labkit.predict.profiles import FRAMEWORKS, profile


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.xfail(
    n in rs.OPEN, strict=True, reason=rs.OPEN.get(n, ""))) for n in rs.SETS])
def test_every_run_within_the_sets_tolerance(name: str) -> None:
    refs = rs.compare(name)
    assert refs and all(r.published_s > 0 and r.predicted_s > 0 for r in refs)
    tol = rs.TOLERANCE[name]
    bad = [(r.label, round(r.ratio, 3)) for r in refs if not 1 - tol <= r.ratio <= 1 + tol]
    assert not bad, f"{name}: outside {tol:.0%}: {bad}"


def test_sizes_of_the_sets() -> None:
    assert [len(rs.compare(n)) for n in rs.SETS] == [10, 3, 3, 11, 3, 3, 3, 1]


def test_table2_is_split_by_model_and_no_row_is_left_out(monkeypatch) -> None:
    from labkit.advisor import calibration

    halves = [rs.compare(n) for n in ("sc21-table2-175b", "sc21-table2-530b")]
    assert sum(map(len, halves)) == len(calibration.rows("table2"))
    assert {r.label for r in halves[0]} == {"174.6 bn"} and {r.label for r in halves[1]} == {"529.6 bn"}
    monkeypatch.setitem(rs.SC21, "sc21-table2-530b", ("table2", 529.0))  # a size no row has: its rows are orphans
    rs.compare.cache_clear()
    with pytest.raises(LabkitError, match="belong to no reference set"):
        rs.compare("sc21-table2-175b")
    rs.compare.cache_clear()


def test_sc21_table1_spread_is_at_most_0_15() -> None:
    """Nothing fitted on Table 1 since issue 29: 0.91-1.02."""
    ratios = [r.ratio for r in rs.compare("sc21-table1")]
    assert max(ratios) - min(ratios) <= 0.15


def test_mpt_13b_keeps_its_throughput_from_8_to_64_gpus() -> None:
    """FSDP on 8 ports per node: the per-GPU gather volume does not shrink, but it is hidden and 8 ports carry it."""
    by = {r.label: r for r in rs.compare("llm-foundry-h100")}
    eight, sixty_four = by["mpt-13b on 8"], by["mpt-13b on 64"]
    assert sixty_four.predicted_tflops == pytest.approx(eight.predicted_tflops, rel=0.05)


def test_the_profile_changes_the_answer_where_the_framework_does() -> None:
    """The same H200 run priced as Megatron's fused kernels is far faster than eager PyTorch measured it."""
    eager = rs.compare("h200-eager")
    assert all(r.predicted_tflops < 0.45 * 989 for r in eager)  # eager loops reach well under half the peak
    assert {profile(f).name for f in FRAMEWORKS} == set(FRAMEWORKS)


def test_tables_print_published_beside_predicted() -> None:
    text = rs.table("llm-foundry-h100")
    assert "framework fsdp" in text and "mpt-70b on 64" in text and "published s" in text
    with pytest.raises(LabkitError, match="^reference set must be one of sc21-table1"):
        rs.compare("mlperf")


def test_bench_prints_every_reference_set(capsys) -> None:
    from labkit import bench
    from labkit.advisor import bench as advisor_bench

    assert "labkit.advisor.bench" in bench.TOPIC_BENCHES
    advisor_bench.main(quick=True)
    out = capsys.readouterr().out
    for name in rs.SETS:
        assert rs.SOURCE[name] in out
    assert out.count("worst:") == len(rs.SETS)


def test_megatron_te_hides_tensor_parallel_traffic_that_megatron_2021_exposes() -> None:
    from labkit.advisor import costing
    from labkit.advisor.costing import Layout
    from labkit.shapes import model_shape

    shape, lay = model_shape("gpt3-175b"), Layout(8, 8, 16, 1, 0, "full")
    old = costing.step_times(shape, 2048, 1536, lay, costing.machine("H100-SXM", 1024, framework="megatron-2021"))
    new = costing.step_times(shape, 2048, 1536, lay, costing.machine("H100-SXM", 1024, framework="megatron-te"))
    assert old["tp"] > 0 and new["tp"] < old["tp"]
    assert new["compute"] < old["compute"]  # 2021's unfused gradient accumulation, fused in Transformer Engine
