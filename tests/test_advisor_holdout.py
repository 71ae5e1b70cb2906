"""Issue 29: each reference set in-sample within 15% and leave-one-set-out within 25%, and every fitted constant names
the sets it came from. Sets that do not hold yet are strict xfails with the measured range, so they fail loudly once
fixed (and the reason is in the report, never hidden). Issue 39: the joint refit reproduces every stored constant
from its declared sets, and every set is labelled fitted, watched or held out with its evidence. Cost: pricing only
(no torch processes), a few seconds; the fsdp joint grid is 96 points over 11 rows (about 0.3 s)."""

from __future__ import annotations

import pytest

from labkit.advisor import bench, holdout
from labkit.advisor import reference_sets as rs
from labkit.predict import profiles

IN_SAMPLE_MISSES = holdout.IN_SAMPLE_OPEN
HELD_OUT_MISSES = holdout.HELD_OUT_OPEN


def _within(lo_hi: tuple[float, float], tol: float) -> bool:
    return 1 - tol <= lo_hi[0] and lo_hi[1] <= 1 + tol


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.xfail(n in IN_SAMPLE_MISSES, strict=True,
                                                                          reason=IN_SAMPLE_MISSES.get(n, "")))
                                  for n in rs.SETS])
def test_in_sample_within_15_percent(name: str) -> None:
    assert _within(holdout.summary(name).in_sample, bench.IN_SAMPLE_TOLERANCE)


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.xfail(n in HELD_OUT_MISSES, strict=True,
                                                                          reason=HELD_OUT_MISSES.get(n, "")))
                                  for n in rs.SETS])
def test_leave_one_set_out_within_25_percent(name: str) -> None:
    assert _within(holdout.summary(name).held_out, bench.HELD_OUT_TOLERANCE)


def test_holding_a_set_out_changes_only_the_constants_fitted_on_it_and_restores_them() -> None:
    before = profiles.PROFILES["fsdp"]
    foundry = holdout.leave_one_out("llm-foundry-h100")
    assert profiles.PROFILES["fsdp"] is before
    assert [r.ratio for r in foundry] != [r.ratio for r in rs.compare("llm-foundry-h100")]
    assert holdout.leave_one_out("sc21-table1") == rs.compare("sc21-table1")  # nothing is fitted on Table 1


def test_every_fitted_constant_names_its_source_set_and_the_value_it_holds() -> None:
    for c in holdout.FITTED:
        assert c.fitted_on and all(s in rs.SETS and rs.FRAMEWORK[s] == c.profile for s in c.fitted_on)
        assert getattr(profiles.PROFILES[c.profile], c.field) in c.grid
    assert any("fitted on llm-foundry-h100" in s for s in holdout.sources("torchtitan-h100"))


def test_table2_models_are_each_judged_by_constants_chosen_on_the_other_alone() -> None:
    """Table 2's two models are two sets: holding one out refits deepspeed-2021's two constants on the other's three
    rows only, which choose one port and half exposed again, so each model's held-out rows are its in-sample ones."""
    assert rs.FRAMEWORK["sc21-table2-175b"] == rs.FRAMEWORK["sc21-table2-530b"] == "deepspeed-2021"
    mine = [c for c in holdout.FITTED if c.profile == "deepspeed-2021"]
    assert {c.fitted_on for c in mine} == {("sc21-table2-175b", "sc21-table2-530b")}
    for held, other in (("sc21-table2-175b", "sc21-table2-530b"), ("sc21-table2-530b", "sc21-table2-175b")):
        assert holdout.held_out_values(held) == ({"aggregate_ports": False, "exposed_share": 0.5}, [other])
        assert holdout.leave_one_out(held) == rs.compare(held)
    assert holdout.refit("deepspeed-2021", mine, []) == {"aggregate_ports": True, "exposed_share": 0.0}  # the priors


def test_at_priors_puts_back_every_fitted_constant_and_restores_them() -> None:
    """Table 2 at the priors (every port, nothing exposed) is the 1.6-5x optimistic model the fit replaced."""
    before = profiles.PROFILES["deepspeed-2021"]
    bare = holdout.at_priors("sc21-table2-175b")
    assert profiles.PROFILES["deepspeed-2021"] is before
    assert max(r.ratio for r in bare) < 0.7 < min(r.ratio for r in rs.compare("sc21-table2-175b"))
    assert holdout.at_priors("sc21-table1") == rs.compare("sc21-table1")  # megatron-2021 has nothing fitted


def test_opt_175b_is_priced_within_20_percent() -> None:
    (opt,) = rs.compare("opt-175b")
    assert 0.8 <= opt.ratio <= 1.2 and opt.feasible


def test_bench_prints_both_ratios_with_their_spread(capsys) -> None:
    bench.main(quick=True)
    out = capsys.readouterr().out
    assert out.count("leave-one-set-out") == len(rs.SETS) and "fitted on h200-eager" in out
    assert out.count("at their values before fitting") == sum(bool(holdout.sources(n)) for n in rs.SETS)
    assert "The worst ratio per label" in out and all(f"\n{label}" in out for label in rs.LABELS)


def test_the_table_marks_exactly_the_sets_that_miss_and_says_why() -> None:
    text = holdout.table()
    lines = text.splitlines()[2:2 + len(rs.SETS)]
    assert [ln.split()[0] for ln in lines] == list(rs.SETS)
    marks = {ln.split()[0]: (ln.split()[-3], ln.split()[-1]) for ln in lines}
    assert {n for n, m in marks.items() if m[0] == "NO"} == set(IN_SAMPLE_MISSES)
    assert {n for n, m in marks.items() if m[1] == "NO"} == set(HELD_OUT_MISSES)
    assert holdout.misses() == (set(IN_SAMPLE_MISSES), set(HELD_OUT_MISSES))
    assert all(f"{n}: {r}" in text for n, r in (IN_SAMPLE_MISSES | HELD_OUT_MISSES).items())
    # Table 2's "yes" is qualified where it is printed
    assert all(f"note, held out: {n}: {r}" in text for n, r in holdout.WITHIN_ONE_SOURCE.items())


@pytest.mark.parametrize("profile", sorted({c.profile for c in holdout.FITTED}))
def test_refitting_each_profile_on_its_declared_sets_reproduces_its_stored_constants(profile: str) -> None:
    """The stated rule (a joint grid's minimax of |log ratio|) run on the sets each constant is declared fitted on
    gives exactly the constants ``predict.profiles`` stores; and no single grid step from them does better."""
    mine = [c for c in holdout.FITTED if c.profile == profile]
    declared = sorted({s for c in mine for s in c.fitted_on})
    stored = {c.field: getattr(profiles.PROFILES[profile], c.field) for c in mine}
    assert holdout.refit(profile, mine, declared) == stored
    with holdout.profile_constants(profile, **stored):
        best = holdout.worst_log(declared)
    for c in mine:
        i = c.grid.index(stored[c.field])
        for j in (i - 1, i + 1):
            if 0 <= j < len(c.grid):
                with holdout.profile_constants(profile, **(stored | {c.field: c.grid[j]})):
                    assert holdout.worst_log(declared) >= best


def test_fsdp_refit_beats_the_triple_it_replaced() -> None:
    """0.60 / 0.75 / 30 (worst |log ratio| 0.098 on llm-foundry) against the 0.60 / 0.50 / 20 once stored (0.139)."""
    with holdout.profile_constants("fsdp"):
        now = holdout.worst_log(["llm-foundry-h100"])
    with holdout.profile_constants("fsdp", gemm_efficiency=0.6, exposed_share=0.5, bsh_passes=20.0):
        before = holdout.worst_log(["llm-foundry-h100"])
    assert now == pytest.approx(0.098, abs=5e-4) and before == pytest.approx(0.139, abs=5e-4)


def test_every_set_carries_a_label_with_its_evidence() -> None:
    import re
    import subprocess
    from pathlib import Path

    fitted = {s for c in holdout.FITTED for s in c.fitted_on}
    assert set(rs.LABEL) == set(rs.SETS) == set(rs.EVIDENCE)
    assert {n for n in rs.SETS if rs.LABEL[n] == "fitted"} == fitted
    assert all(rs.LABEL[n] in rs.LABELS for n in rs.SETS)
    root = Path(__file__).resolve().parents[1]
    for name in rs.SETS:
        commits = re.findall(r"\b[0-9a-f]{7}\b", rs.EVIDENCE[name])
        assert commits or rs.LABEL[name] != "watched", name  # a watched set names the commits that consulted it
        if (root / ".git").exists():
            for c in commits:
                assert subprocess.run(["git", "-C", str(root), "cat-file", "-e", f"{c}^{{commit}}"],
                                      capture_output=True).returncode == 0, (name, c)
    worst = holdout.worst_by_label()
    assert worst["held out"] is None and worst["fitted"][1] == "llm-foundry-h100" and worst["watched"][1] == "opt-175b"
