"""03.build.tp_layers on real gloo ranks (2, 4 and 3): the reference and an independent module pass; every bug,
a named edit of the reference (tests/build_mutate.py), fails with its own name; the stub is "not written yet".

Cost: one launch per world size for the reference, the independent module and eight mutants together (about
15-20 s on 2 cores), one mutant whose collective only rank 0 calls (gloo stops the group at once: about 3 s),
the benchmark on 2 ranks (about 4 s), the stub and the malformed records without processes.
The hidden runs (instructor/build/hidden.json), reference and independent module:
one 3-rank launch, about 4 s.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from build_mutate import mutant

from labkit.practice import build
from labkit.practice.build import tp_collect, tp_layers

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = ROOT / "instructor" / "build" / "tp_layers.py"
ALT = ROOT / "tests" / "build_alt" / "tp_layers.py"
COL = "return weight.chunk(world, dim=0)[rank].clone(), bias.chunk(world, dim=0)[rank].clone()"
MUTANTS = {  # bug -> (its name in the feedback, the edits)
    "hard2": ("world size hard-coded to 2", [(COL, COL.replace("world, dim", "2, dim"))]),
    "extra_backward": ("an extra all-reduce in backward", [
        ("    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:\n        return grad\n",
         "    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:\n        grad = grad.contiguous().clone()\n"
         "        dist.all_reduce(grad)\n        return grad\n")]),
    "f_missing": ("f's backward does not all-reduce", [("        dist.all_reduce(grad)\n", "")]),
    "g_missing": ("g's forward does not all-reduce", [("        dist.all_reduce(out)\n", "")]),
    "bias_before": ("bias added before the row-parallel all-reduce", [
        ("ReduceFromParallel.apply(F.linear(x, self.weight)) + self.bias",
         "ReduceFromParallel.apply(F.linear(x, self.weight, self.bias))")]),
    "no_contiguous": ("missing .contiguous()", [("grad = grad.contiguous().clone()  #", "#")]),
    "wrong_dim": ("split the wrong dimension", [(COL, COL.replace("weight.chunk(world, dim=0)",
                                                                 "weight.chunk(world, dim=1)"))]),
    "strided": ("a strided split", [(COL, "return weight[rank::world].clone(), bias[rank::world].clone()"),
                                    ("weight.chunk(world, dim=1)[rank].contiguous()",
                                     "weight[:, rank::world].contiguous()")]),
}
SOME_RANKS = ("a collective only some ranks call", [
    ("        dist.all_reduce(grad)\n", "        if dist.get_rank() == 0:\n            dist.all_reduce(grad)\n")])
NAMES = [name for name, _ in [*MUTANTS.values(), SOME_RANKS]]


def _text(cases) -> str:
    return "\n".join(f"{'pass' if c.ok else 'FAIL'} {c.name}: {c.detail} {' '.join(c.hints)}" for c in cases)


def _only_its_name(text: str, name: str) -> None:
    assert name in text, text
    assert not [n for n in NAMES if n != name and n in text], text


@pytest.mark.procs
def test_reference_alt_and_every_mutant_in_one_launch_per_world(tmp_path):
    params = build.draw_params(tp_layers.KEY, seed=3)
    assert params["worlds"] == [2, 4, 3] and params["ffn"] % 12 == 0
    paths = [REFERENCE, ALT]
    for bug, (_, edits) in MUTANTS.items():
        (tmp_path / bug).mkdir()
        paths.append(mutant(tmp_path / bug, "tp_layers.py", *edits))
    records = tp_collect.collect_many(paths, params)
    for label, rec in zip(["reference", "independent"], records, strict=False):
        cases = build.judge_record(tp_layers.KEY, rec, params)
        assert len(cases) == 7 and all(c.ok for c in cases), (label, _text(cases))
    for (bug, (name, _)), rec in zip(MUTANTS.items(), records[2:], strict=True):
        cases = build.judge_record(tp_layers.KEY, rec, params)
        assert not all(c.ok for c in cases), bug
        _only_its_name(_text([c for c in cases if not c.ok]), name)


@pytest.mark.procs
def test_a_collective_only_some_ranks_call_is_named_with_gloos_own_words(tmp_path):
    path = mutant(tmp_path, "tp_layers.py", *SOME_RANKS[1])
    fb = build.check_build(tp_layers.KEY, path, seed=1)
    assert not fb.ok and "Is there a distributed collective mismatch in your code?" in str(fb), str(fb)
    _only_its_name(str(fb), SOME_RANKS[0])
    assert "Hint 1:" in str(fb)


def test_blank_stub_is_not_written_yet(tmp_path):
    path = build.open_stub(tp_layers.KEY, tmp_path)
    assert "contiguous block" in path.read_text()
    fb = build.check_build(tp_layers.KEY, path)
    assert not fb.ok and str(fb).startswith("Not written yet")


def test_a_malformed_record_fails_as_one_case_never_a_crash():
    params = build.draw_params(tp_layers.KEY, seed=0)
    for bad in ({}, {"runs": [{"world": 2, "ranks": [{}]}]}, {"runs": [{"world": 3, "ranks": []}]}):
        cases = build.judge_record(tp_layers.KEY, bad, params)
        assert len(cases) == 1 and not cases[0].ok and "well-formed" in cases[0].name


def test_draw_gives_shapes_every_world_divides():
    for seed in range(20):
        p = tp_layers.draw(seed)
        assert all(p["ffn"] % w == 0 for w in p["worlds"]) and 3 in p["worlds"]


@pytest.mark.procs
def test_benchmark_bytes_match_the_prediction_for_both_engines():
    rows = tp_layers.benchmark(REFERENCE, steps=1)
    assert [r["engine"] for r in rows] == ["yours", "torch DTensor"], rows
    for r in rows:
        assert r["bytes all-reduced"] == r["predicted bytes"], rows


@pytest.mark.procs
def test_reference_and_independent_module_pass_the_hidden_runs():
    params = build.draw_params(tp_layers.KEY, seed=6)
    hidden = build.hidden_params(tp_layers.KEY, params)
    assert hidden and all(p["hidden"] for p in hidden)
    for p in hidden:
        records = tp_collect.collect_many([REFERENCE, ALT], p)
        for label, rec in zip(["reference", "independent"], records, strict=True):
            cases = build.judge_record(tp_layers.KEY, rec, p)
            assert cases and all(c.ok for c in cases), (label, _text(cases))
