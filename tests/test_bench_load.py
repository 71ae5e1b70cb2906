"""``labkit bench --notebooks`` under load: the busy processes start, compete and are gone afterwards.

The studies themselves (02's bubble, 05's speed table, 06's checkpoint stalls, about a minute under load) run only
in ``labkit bench``; here, the load, the report, and one notebook of a single failing assert run under load (one
kernel start). Cost: about 4 s.
"""

from __future__ import annotations

import os
import time

from labkit import bench


def _cpu_seconds(pid: int) -> float:
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_the_busy_processes_compete_and_are_reaped():
    with bench.busy() as pids:
        assert len(pids) == bench.BUSY
        time.sleep(0.6)
        assert all(_cpu_seconds(p) > 0.1 for p in pids)  # each really burns a core
    assert not any(os.path.exists(f"/proc/{p}") for p in pids)


def test_each_claim_is_reported_held_or_not(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(bench, "studies_under_load", lambda quick: {"02: a": True, "05: b": False})
    bench._print_under_load(tmp_path, quick=False)  # no notebooks in tmp_path: the studies only
    out = capsys.readouterr().out
    assert "  yes  02: a\n" in out and "  NO   05: b\n" in out and "2 busy processes" in out


def test_a_notebook_whose_assert_fails_under_load_is_reported_not_raised(tmp_path):
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("held = {'a trend': False}\nassert all(held.values()), held")]
    nbformat.write(nb, tmp_path / "99_x.ipynb")
    [(name, seconds, error)] = bench.notebooks_under_load(tmp_path, ("99_x.ipynb",))
    assert name == "99_x.ipynb" and seconds > 0 and "AssertionError" in error


# The trend helpers whose claims read wall-clock figures (the others read models, simulations and seeded runs).
TIMING_TRENDS = ("bubble.trends(", "compress.speed_trends(", "trends.save_cost(")


def test_every_notebook_asserting_a_timing_trend_is_run_under_load():
    from pathlib import Path

    sources = Path(__file__).resolve().parent.parent / "tools" / "notebooks"
    timing = {f"{p.stem}.ipynb" for p in sources.glob("*.py") if any(t in p.read_text() for t in TIMING_TRENDS)}
    assert len(timing) >= 3 and timing <= set(bench.NOTEBOOKS), timing - set(bench.NOTEBOOKS)
