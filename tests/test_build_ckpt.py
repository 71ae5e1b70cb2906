"""06.build.sharded_ckpt in child processes, with real SIGKILLs: the reference and an independent module pass;
each bug, a named edit of the reference (tests/build_mutate.py), fails with its own name; the stub is "not written
yet" without a process.

Cost: the reference's whole check (round trips on 2 and 4 ranks, two SIGKILL runs, one loading child: about 12 s on
2 cores); the independent module and the five mutants share one round-trip launch per world size and one loading
child (about 8 s); the kill alone catches an uncoordinated commit (one more kill run and load, about 5 s).
The hidden runs (instructor/build/hidden.json), reference and independent module:
one round trip on 3 ranks and a loading child, about 2 s.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from build_mutate import mutant

from labkit.practice import build
from labkit.practice.build import sharded_ckpt

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = ROOT / "instructor" / "build" / "sharded_ckpt.py"
ALT = ROOT / "tests" / "build_alt" / "sharded_ckpt.py"
NO_DIGEST = ("    if _sha256(shard) != digest:", "    if digest is not None and _sha256(shard) != digest:")
GATHER = "    dist.all_gather_object(shards, [shard.name, _sha256(shard)])  # every shard durable before the manifest\n"
MANIFEST = '''    if rank == 0:
        tmp = folder / "manifest.json.tmp"
        with open(tmp, "w") as f:
            json.dump({"step": step, "world": world, "dir": where.name, "shards": shards}, f)
            f.flush()
            os.fsync(f.fileno())
        _durable(tmp, folder / "manifest.json")
'''
EARLY = '''    shards = [[f"shard-{r}.pt", None] for r in range(world)]  # no checksums: not written yet
''' + MANIFEST
MUTANTS = {
    "no_fsync": ("rename without fsync", [
        ("        torch.save(state, f)\n        f.flush()\n        os.fsync(f.fileno())\n",
         "        torch.save(state, f)\n        f.flush()\n"),
        ("            f.flush()\n            os.fsync(f.fileno())\n", "            f.flush()\n"),
        ("        os.fsync(fd)\n", "        pass\n")]),
    "manifest_first": ("manifest written before the shards", [
        ('    shard, tmp = where / f"shard-{rank}.pt"', EARLY + '    shard, tmp = where / f"shard-{rank}.pt"'),
        ("    shards: list = [None] * world\n" + GATHER + MANIFEST, ""), NO_DIGEST]),
    "no_barrier": ("no barrier between the shard writes and the manifest", [
        (GATHER, "    shards = [[f\"shard-{r}.pt\", None] for r in range(world)]  # rank 0 knows only its own\n"),
        NO_DIGEST]),
    "weights_only_false": ("weights_only=False ran code", [
        ('    if _sha256(shard) != digest:\n        raise ValueError(f"{shard} does not match its checksum in the '
         'manifest")\n', ""), ("weights_only=True", "weights_only=False")]),
    "overwrite": ("ranks overwriting each other's shard file", [
        ('shard, tmp = where / f"shard-{rank}.pt"', 'shard, tmp = where / "shard.pt"')]),
}
NAMES = [name for name, _ in MUTANTS.values()]


def _text(cases) -> str:
    return "\n".join(f"{'pass' if c.ok else 'FAIL'} {c.name}: {c.detail}" for c in cases)


@pytest.mark.procs
def test_reference_passes_every_case_including_the_kills():
    fb = build.check_build(sharded_ckpt.KEY, REFERENCE, seed=4)
    assert fb.ok, str(fb)
    assert "SIGKILL of rank 1 half-way through its shard" in str(fb) and "SIGKILL of rank 0" in str(fb)
    assert "[4 ranks]" in str(fb) and "round trip on 4 ranks" in str(fb)


@pytest.mark.procs
def test_alt_and_every_mutant_share_the_launches(tmp_path):
    params = build.draw_params(sharded_ckpt.KEY, seed=2)
    paths = [ALT]
    for bug, (_, edits) in MUTANTS.items():
        (tmp_path / bug).mkdir()
        paths.append(mutant(tmp_path / bug, "sharded_ckpt.py", *edits))
    records = sharded_ckpt.collect_many(paths, params, kills=False)
    cases = build.judge_record(sharded_ckpt.KEY, records[0], params)
    assert all(c.ok for c in cases), _text(cases)
    for (bug, (name, _)), rec in zip(MUTANTS.items(), records[1:], strict=True):
        text = _text(c for c in build.judge_record(sharded_ckpt.KEY, rec, params) if not c.ok)
        assert name in text, (bug, text)
        assert not [n for n in NAMES if n != name and n in text], (bug, text)


@pytest.mark.procs
def test_the_kill_alone_catches_an_uncoordinated_commit(tmp_path):
    path = mutant(tmp_path, "sharded_ckpt.py", *MUTANTS["no_barrier"][1])
    params = {**build.draw_params(sharded_ckpt.KEY, seed=5), "worlds": [2], "kills": [[1, 1.0]]}
    record = sharded_ckpt.collect(path, params)
    killed = [c for c in build.judge_record(sharded_ckpt.KEY, record, params) if c.name.startswith("SIGKILL")]
    assert killed and not killed[0].ok and "does not load" in killed[0].detail, _text(killed)


def test_blank_stub_is_not_written_yet_without_a_process(tmp_path, monkeypatch):
    path = build.open_stub(sharded_ckpt.KEY, tmp_path)
    monkeypatch.setattr(sharded_ckpt.records, "ranks", lambda *a, **k: pytest.fail("a process was started"))
    fb = build.check_build(sharded_ckpt.KEY, path)
    assert not fb.ok and str(fb).startswith("Not written yet")


def test_a_malformed_record_fails_as_one_case():
    params = build.draw_params(sharded_ckpt.KEY, seed=0)
    for bad in ({}, {"load": {"world": 1, "ranks": [{"loads": {}, "evil": {}, "weights_only": []}]}}):
        cases = build.judge_record(sharded_ckpt.KEY, bad, params)
        assert len(cases) == 1 and not cases[0].ok, _text(cases)


@pytest.mark.procs
def test_reference_and_independent_module_pass_the_hidden_runs():
    params = build.draw_params(sharded_ckpt.KEY, seed=6)
    hidden = build.hidden_params(sharded_ckpt.KEY, params)
    assert hidden and all(p["hidden"] for p in hidden)
    for p in hidden:
        records = sharded_ckpt.collect_many([REFERENCE, ALT], p, kills=False)  # the reference's test runs kills
        for label, rec in zip(["reference", "independent"], records, strict=True):
            cases = build.judge_record(sharded_ckpt.KEY, rec, p)
            assert cases and all(c.ok for c in cases), (label, _text(cases))
