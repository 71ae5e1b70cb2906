"""``labkit bench --notebooks`` under load: the busy processes start, compete and are gone afterwards.

The studies themselves (02's bubble, 05's speed table, about a minute under load) run only in ``labkit bench``;
here, the load and the report. Cost: about 1 s.
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
