"""Published figures as data: loaded, checked, and turned into rates."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from labkit import references as refs
from labkit.errors import LabkitError
from labkit.shapes import load_models


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


ROOT = Path(__file__).resolve().parent.parent
TRAINED_TABLE1 = re.compile(r"trained\W.{0,300}?Table\s*1|Table\s*1\W.{0,300}?\btrained\b", re.IGNORECASE | re.DOTALL)
MEGATRON_TABLE1 = re.compile(r"(GPT-3|175\s*B).{0,200}?(pp\s*=?\s*16|pipeline (p\s*=\s*)?16|16-stage)"
                             r".{0,300}?Table\s*1", re.IGNORECASE | re.DOTALL)
TRAINED_ON_1024 = re.compile(r"trained GPT-3\W.{0,60}?1,?024", re.IGNORECASE | re.DOTALL)


def _text_files():
    for folder in ("labkit", "datasets", "tools/notebooks", "labs"):
        for path in (ROOT / folder).rglob("*"):
            if path.suffix in {".py", ".toml", ".md", ".ipynb", ".txt"} and path.is_file():
                yield path


def test_megatron_example_is_never_credited_as_a_table1_training_run():
    """Narayanan et al.'s Table 1 has no GPT-3 175B row; tp 8 x pp 16 x 1,024 GPUs is Megatron-LM's example script."""
    bad = [str(p.relative_to(ROOT)) for p in _text_files()
           if any(r.search(p.read_text(errors="replace")) for r in (TRAINED_TABLE1, MEGATRON_TABLE1, TRAINED_ON_1024))]
    assert not bad, f"'trained ... Table 1' attribution in {bad}"
    ref = refs.section("activations")["megatron_gpt3"]
    assert "pretrain_gpt3_175B.sh" in ref["source"] and "Table 1" not in ref["source"]
    assert ref["tp"] * ref["pp"] * ref["dp"] == ref["gpus"] == 1024


def test_the_attribution_check_catches_the_old_sentence():
    old = ("Megatron-LM trained GPT-3 175B on 1,024 A100-80GB with tensor parallel 8 inside each node, a 16-stage "
           "pipeline across nodes and data parallel 8, global batch 1,536 (Narayanan et al., SC 2021, Table 1).")
    assert TRAINED_TABLE1.search(old) and MEGATRON_TABLE1.search(old) and TRAINED_ON_1024.search(old)


def _printed(n: int) -> list[str]:
    return [str(n), f"{n:,}"]


@pytest.mark.parametrize("name", sorted({m.name for m in load_models().values()}))
def test_model_sources_quote_the_values_they_are_cited_for(name):
    """Every shape number of a preset is written in its source, beside the table or file it comes from."""
    shape = load_models()[name]
    values = [shape.layers, shape.hidden, shape.heads, shape.vocab, shape.seq, shape.ffn, shape.kv_heads]
    for v in (v for v in values if v):
        assert any(re.search(rf"(?<![\d,]){re.escape(t)}(?!\d|,\d)", shape.source) for t in _printed(v)), (name, v)


def test_zero_table2_rows():
    rows = refs.zero_table2()
    assert [r.mp for r in rows] == [1, 2, 4, 8, 16] and all(r.dp == 64 for r in rows)
    assert rows[0].params == (2e9, 7.6e9, 14.4e9, 128e9) and rows[0].device_gb == 32


def test_sources_name_the_right_papers():
    act = refs.section("activations")
    assert act["flops_form"].startswith("72*B*s*L*h^2") and act["flops_source"].startswith("Korthikanti")
    assert refs.section("energy_pj")["source"].startswith("Han et al.")
    assert refs.zero_examples()[0].stage_gb == (120, 31.4, 16.6, 1.9)
