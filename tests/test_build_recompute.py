"""05.build.selective_recompute in a child process: the reference and an independent module pass; each bug, a
named edit of the reference (tests/build_mutate.py), fails with its own name; the stub is "not written yet".

Cost: one child process for the reference, the independent module and the four mutants together (about 3 s on
2 cores); the predictions and the stub without processes.
The hidden runs (instructor/build/hidden.json), reference and independent module:
one more child, under 1 s.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from build_mutate import mutant

from labkit.practice import build
from labkit.practice.build import selective_recompute as sr

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = ROOT / "instructor" / "build" / "selective_recompute.py"
ALT = ROOT / "tests" / "build_alt" / "selective_recompute.py"
CORE = "checkpoint(a.core, q, k, v, use_reentrant=False)"
MUTANTS = {
    "nothing": ("nothing recomputed", [(CORE, "a.core(q, k, v)")]),
    "whole_block": ("the whole block recomputed", [
        ("    a = block.attn\n", "    return checkpoint(block, x, use_reentrant=False)\n    a = block.attn\n")]),
    "mlp_too": ("recomputes more than the attention core", [
        ("return x + block.mlp(block.ln_2(x))",
         "return x + checkpoint(block.mlp, block.ln_2(x), use_reentrant=False)")]),
    "rng": ("the dropout mask was not replayed", [
        (CORE, "checkpoint(a.core, q, k, v, use_reentrant=False, preserve_rng_state=False)")]),
}
NAMES = [name for name, _ in MUTANTS.values()]


def _text(cases) -> str:
    return "\n".join(f"{'pass' if c.ok else 'FAIL'} {c.name}: {c.detail}" for c in cases)


@pytest.mark.procs
def test_reference_alt_and_every_mutant_in_one_child(tmp_path):
    params = build.draw_params(sr.KEY, seed=8)
    paths = [REFERENCE, ALT]
    for bug, (_, edits) in MUTANTS.items():
        (tmp_path / bug).mkdir()
        paths.append(mutant(tmp_path / bug, "selective_recompute.py", *edits))
    records = sr.collect_many(paths, params)
    for label, rec in zip(["reference", "independent"], records, strict=False):
        cases = build.judge_record(sr.KEY, rec, params)
        assert len(cases) == 3 and all(c.ok for c in cases), (label, _text(cases))
    for (bug, (name, _)), rec in zip(MUTANTS.items(), records[2:], strict=True):
        text = _text(c for c in build.judge_record(sr.KEY, rec, params) if not c.ok)
        assert name in text, (bug, text)
        assert not [n for n in NAMES if n != name and n in text], (bug, text)


def test_predictions_drop_the_score_term_and_keep_the_rest():
    for seed in range(5):
        p = {**sr.draw(seed), "seed": seed}
        pred = sr.predictions(p)
        s, b, h, a = p["seq"], p["batch"], p["d_model"], p["n_head"]
        assert pred["full"] == 4 * s * b * h  # the block's input, fp32
        assert pred["none"] - pred["selective"] == a * s * s * b * (2 * 4 + 1)  # scores, softmax (fp32), 1-byte mask


def test_blank_stub_is_not_written_yet_without_a_process(tmp_path, monkeypatch):
    path = build.open_stub(sr.KEY, tmp_path)
    monkeypatch.setattr(sr.records, "ask", lambda *a, **k: pytest.fail("a process was started"))
    fb = build.check_build(sr.KEY, path)
    assert not fb.ok and str(fb).startswith("Not written yet")


def test_a_malformed_record_fails_as_one_case():
    params = build.draw_params(sr.KEY, seed=0)
    for bad in ({}, {"world": 1, "ranks": [{"out": 3}]}, {"world": 1, "ranks": [{}, {}]}):
        cases = build.judge_record(sr.KEY, bad, params)
        assert len(cases) == 1 and not cases[0].ok, _text(cases)


@pytest.mark.procs
def test_reference_and_independent_module_pass_the_hidden_runs():
    params = build.draw_params(sr.KEY, seed=6)
    hidden = build.hidden_params(sr.KEY, params)
    assert hidden and all(p["hidden"] for p in hidden)
    for p in hidden:
        records = sr.collect_many([REFERENCE, ALT], p)
        for label, rec in zip(["reference", "independent"], records, strict=True):
            cases = build.judge_record(sr.KEY, rec, p)
            assert cases and all(c.ok for c in cases), (label, _text(cases))
