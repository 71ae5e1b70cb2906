"""Published figures as data: loaded, checked, and turned into rates."""

from __future__ import annotations

import pytest

from labkit import references as refs
from labkit.errors import LabkitError


def test_every_entry_has_a_source():
    raw = refs.load_references()
    tables = [v for v in raw.values() if isinstance(v, dict)]
    lists = [e for v in raw.values() if isinstance(v, list) for e in v]
    for entry in tables + lists:
        assert entry.get("source"), entry


def test_llama3_rate_and_mtbf():
    llama = next(t for t in refs.failure_traces() if t.name == "Llama 3")
    assert llama.failures_per_day(16384) == pytest.approx(419 / 54)
    assert llama.failures_per_day(8192) == pytest.approx(llama.failures_per_day(16384) / 2)
    assert llama.mtbf_hours(16384) == pytest.approx(24 * 54 / 419)
    with pytest.raises(LabkitError, match="n_gpus must be a positive integer"):
        llama.failures_per_day(0)


def test_headlines_and_sections():
    assert refs.headline("zero-offload")["params"] == 13e9
    assert refs.section("energy_pj")["dram_read_32bit"] == 640
    with pytest.raises(LabkitError, match="system must be one of .*vDNN"):
        refs.headline("nope")
    with pytest.raises(LabkitError, match="section must be one of .*zero"):
        refs.section("nope")


@pytest.mark.parametrize("body, message", [
    ('[[failure_trace]]\nname = "x"\ngpu = "g"\ngpus = -1\ndays = 1\ninterruptions = 1\nunexpected = 1\n'
     'source = "s"', "gpus must be a non-negative number"),
    ('[[failure_trace]]\nname = "x"\ngpu = "g"\ngpus = 8\ndays = 1\ninterruptions = 1\nunexpected = 2\n'
     'source = "s"', "unexpected must be at most interruptions=1"),
    ('[[failure_trace]]\nname = "x"\ngpus = 8\ndays = 1\ninterruptions = 1\nunexpected = 1\nsource = "s"',
     "gpu must be a non-empty string"),
    ("not toml [", "is not valid TOML"),
])  # fmt: skip
def test_bad_trace_files_name_the_field(tmp_path, body, message):
    path = tmp_path / "refs.toml"
    path.write_text(body)
    with pytest.raises(LabkitError, match=message):
        refs.failure_traces(str(path))


def test_missing_file_is_named(tmp_path):
    with pytest.raises(LabkitError, match="cannot be read"):
        refs.load_references(str(tmp_path / "absent.toml"))
