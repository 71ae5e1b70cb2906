"""04.build.act_offload in a child process: the reference and an independent module pass; each bug, a named edit of
the reference (tests/build_mutate.py), fails with its own name; the stub is "not written yet".

Cost: one child process for the reference, the independent module and the four mutants together (about 3 s on
2 cores), the benchmark in one more (about 2 s), the rest without processes.
The hidden runs (instructor/build/hidden.json), reference and independent module:
one more child, under 1 s.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from build_mutate import mutant

from labkit.practice import build
from labkit.practice.build import act_offload

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = ROOT / "instructor" / "build" / "act_offload.py"
ALT = ROOT / "tests" / "build_alt" / "act_offload.py"
MUTANTS = {
    "params_too": ("parameters offloaded too", [
        ("        if t.untyped_storage().data_ptr() in self.params:\n"
         "            return t  # a parameter stays where it is: it is not an activation\n", "")]),
    "kept_in_memory": ("kept in memory as well as written", [
        ("return path, t.dtype, tuple(t.shape)", "return path, t.dtype, tuple(t.shape), t"),
        ("path, dtype, shape = handle", "path, dtype, shape, _ = handle")]),
    "dtype_lost": ("the dtype was lost", [
        ("(c.view(torch.int16) if c.dtype == torch.bfloat16 else c).numpy().tofile(path)",
         "c.float().numpy().tofile(path)"),
        ("arr = np.fromfile(path, dtype=torch.empty(0, dtype=raw).numpy().dtype)",
         "arr = np.fromfile(path, dtype=np.float32)"),
        ("return torch.from_numpy(arr).view(dtype).view(shape)", "return torch.from_numpy(arr).view(shape)")]),
    "leaks_files": ("leaking files", [("        os.remove(path)  # read once: the file's job is done\n", "")]),
}
NAMES = [name for name, _ in MUTANTS.values()]


def _text(cases) -> str:
    return "\n".join(f"{'pass' if c.ok else 'FAIL'} {c.name}: {c.detail}" for c in cases)


@pytest.mark.procs
def test_reference_alt_and_every_mutant_in_one_child(tmp_path):
    params = build.draw_params(act_offload.KEY, seed=11)
    assert params["dtypes"] == ["float32", "bfloat16", "float16"]  # this seed draws the third dtype too
    paths = [REFERENCE, ALT]
    for bug, (_, edits) in MUTANTS.items():
        (tmp_path / bug).mkdir()
        paths.append(mutant(tmp_path / bug, "act_offload.py", *edits))
    records = act_offload.collect_many(paths, params)
    for label, rec in zip(["reference", "independent"], records, strict=False):
        cases = build.judge_record(act_offload.KEY, rec, params)
        assert len(cases) == 2 * len(params["dtypes"]) + 2 and all(c.ok for c in cases), (label, _text(cases))
    for (bug, (name, _)), rec in zip(MUTANTS.items(), records[2:], strict=True):
        text = _text(c for c in build.judge_record(act_offload.KEY, rec, params) if not c.ok)
        assert name in text, (bug, text)
        assert not [n for n in NAMES if n != name and n in text], (bug, text)


def test_prediction_is_the_saved_activations_by_hand():
    for seed in range(3):
        p = {**act_offload.draw(seed), "seed": seed}
        b, w, h = p["batch"], p["width"], p["hidden"]
        # fc1 keeps its input (the batch), GELU its input, fc2 its input; no weight: they are parameters
        assert act_offload.predicted_bytes(p, "float32") == 4 * (b * w + b * h + b * h)
        assert act_offload.predicted_bytes(p, "bfloat16") == 2 * (b * w + b * h + b * h)


def test_blank_stub_is_not_written_yet_without_a_process(tmp_path, monkeypatch):
    path = build.open_stub(act_offload.KEY, tmp_path)
    monkeypatch.setattr(act_offload.records, "ask", lambda *a, **k: pytest.fail("a process was started"))
    fb = build.check_build(act_offload.KEY, path)
    assert not fb.ok and str(fb).startswith("Not written yet")


def test_a_malformed_record_fails_as_one_case():
    params = build.draw_params(act_offload.KEY, seed=0)
    for bad in ({}, {"world": 1, "ranks": [{"float32": {"grads": "x"}}]}, {"world": 1, "ranks": [{}, {}]}):
        cases = build.judge_record(act_offload.KEY, bad, params)
        assert len(cases) == 1 and not cases[0].ok, _text(cases)


@pytest.mark.procs
def test_benchmark_writes_the_predicted_bytes():
    rows = act_offload.benchmark(REFERENCE, steps=2)
    assert [r["run"] for r in rows] == ["no offload", "yours (files)"], rows
    assert rows[0]["bytes written per step"] == 0
    assert rows[1]["bytes written per step"] == rows[1]["predicted bytes"] > 0


@pytest.mark.procs
def test_reference_and_independent_module_pass_the_hidden_runs():
    params = build.draw_params(act_offload.KEY, seed=6)
    hidden = build.hidden_params(act_offload.KEY, params)
    assert hidden and all(p["hidden"] for p in hidden)
    for p in hidden:
        records = act_offload.collect_many([REFERENCE, ALT], p)
        for label, rec in zip(["reference", "independent"], records, strict=True):
            cases = build.judge_record(act_offload.KEY, rec, p)
            assert cases and all(c.ok for c in cases), (label, _text(cases))
