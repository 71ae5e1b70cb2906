"""03.build.sp_block on real gloo ranks (2 and 4): the reference and an independent module pass; every bug, a named
edit of the reference (tests/build_mutate.py), fails with its own name; the stub is "not written yet".

Cost: one launch per world size for the reference, the independent module and six mutants together (about 10 s
on 2 cores); the stub and the malformed records without processes.
The hidden runs (instructor/build/hidden.json), reference and independent module:
one 2-rank launch, about 2 s.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from build_mutate import mutant

from labkit.practice import build
from labkit.practice.build import sp_block, sp_collect

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = ROOT / "instructor" / "build" / "sp_block.py"
ALT = ROOT / "tests" / "build_alt" / "sp_block.py"
RS = '''    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        return _reduce_scatter(x)
'''
MUTANTS = {
    "all_reduce": ("an all-reduce where sequence parallelism reduce-scatters", [
        (RS, RS.replace("return _reduce_scatter(x)", "x = x.contiguous().clone()\n        dist.all_reduce(x)\n"
                        "        return x.chunk(dist.get_world_size(), dim=1)[dist.get_rank()].contiguous()"))]),
    "batch_dim": ("gathered along the batch", [
        ("    local = x.transpose(0, 1).contiguous()  # (s/t, b, h)\n", "    local = x.contiguous()\n"),
        ("    return out.transpose(0, 1)  # (b, s, h)\n", "    return out\n")]),
    "g_backward": ("g's backward does not reduce-scatter", [
        ("    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:\n        return _reduce_scatter(grad)\n",
         "    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:\n"
         "        return grad.chunk(dist.get_world_size(), dim=1)[dist.get_rank()].contiguous()\n")]),
    "heads": ("not q, k and v of its own heads", [
        ("rows = torch.cat([torch.arange(self.width) + j * h + rank * self.width for j in range(3)])",
         "rows = torch.arange(3 * self.width) + rank * 3 * self.width")]),
    "ln_grads": ("LayerNorm gradients not all-reduced", [
        ("for p in (*self.ln_1.parameters(), *self.ln_2.parameters(), self.attn.c_proj.bias, self.mlp.c_proj.bias):",
         "for p in (self.attn.c_proj.bias, self.mlp.c_proj.bias):")]),
    "bias_before": ("bias added before the reduce-scatter", [
        ("ReduceScatterSequence.apply(F.linear(y, self.mlp.c_proj.weight)) + self.mlp.c_proj.bias",
         "ReduceScatterSequence.apply(F.linear(y, self.mlp.c_proj.weight, self.mlp.c_proj.bias))")]),
}
NAMES = [name for name, _ in MUTANTS.values()]


def _text(cases) -> str:
    return "\n".join(f"{'pass' if c.ok else 'FAIL'} {c.name}: {c.detail}" for c in cases)


@pytest.mark.procs
def test_reference_alt_and_every_mutant_in_one_launch_per_world(tmp_path):
    params = build.draw_params(sp_block.KEY, seed=3)
    paths = [REFERENCE, ALT]
    for bug, (_, edits) in MUTANTS.items():
        (tmp_path / bug).mkdir()
        paths.append(mutant(tmp_path / bug, "sp_block.py", *edits))
    records = sp_collect.collect_many(paths, params)
    for label, rec in zip(["reference", "independent"], records, strict=False):
        cases = build.judge_record(sp_block.KEY, rec, params)
        assert len(cases) == 7 and all(c.ok for c in cases), (label, _text(cases))
    for (bug, (name, _)), rec in zip(MUTANTS.items(), records[2:], strict=True):
        text = _text(c for c in build.judge_record(sp_block.KEY, rec, params) if not c.ok)
        assert name in text, (bug, text)
        assert not [n for n in NAMES if n != name and n in text], (bug, text)


def test_blank_stub_is_not_written_yet_without_a_process(tmp_path, monkeypatch):
    path = build.open_stub(sp_block.KEY, tmp_path)
    monkeypatch.setattr(sp_collect.records, "ranks", lambda *a, **k: pytest.fail("a process was started"))
    fb = build.check_build(sp_block.KEY, path)
    assert not fb.ok and str(fb).startswith("Not written yet")


def test_a_malformed_record_fails_as_one_case():
    params = build.draw_params(sp_block.KEY, seed=0)
    for bad in ({}, {"runs": [{"world": 2, "ranks": [{"probes": {}}, {}]}]}, {"runs": [{"world": 4, "ranks": []}]}):
        cases = build.judge_record(sp_block.KEY, bad, params)
        assert len(cases) == 1 and not cases[0].ok and "well-formed" in cases[0].name, _text(cases)


def test_shapes_are_divisible_by_every_world():
    for seed in range(20):
        p = sp_block.draw(seed)
        assert all(p["n_head"] % w == 0 and p["seq"] % w == 0 for w in p["worlds"])


@pytest.mark.procs
def test_reference_and_independent_module_pass_the_hidden_runs():
    params = build.draw_params(sp_block.KEY, seed=6)
    hidden = build.hidden_params(sp_block.KEY, params)
    assert hidden and all(p["hidden"] for p in hidden)
    for p in hidden:
        records = sp_collect.collect_many([REFERENCE, ALT], p)
        for label, rec in zip(["reference", "independent"], records, strict=True):
            cases = build.judge_record(sp_block.KEY, rec, p)
            assert cases and all(c.ok for c in cases), (label, _text(cases))
