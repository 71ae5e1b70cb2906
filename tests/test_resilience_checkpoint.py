"""Checkpoints with DCP: bit-identical resume, atomic commit, corruption caught, no code run, peer memory."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import torch

from labkit import dist as ldist
from labkit.errors import LabkitError
from labkit.resilience.checkpoint import measure_save_stall, save_checkpoint, save_checkpoint_async
from labkit.resilience.corrupt import CORRUPTIONS, corruption_report, damage
from labkit.resilience.manifest import MANIFEST, sha256_file
from labkit.resilience.peer import peer_worker
from labkit.resilience.scan import check_checkpoint, latest_valid, load_checkpoint, resume
from labkit.resilience.state import digest, flat_state, rng_key
from labkit.resilience.worker import micro_config
from labkit.rig.train import Trainer, parameters_equal


@pytest.mark.parametrize("precision", ["fp32", "bf16-mixed"])
def test_resume_is_bit_identical(tmp_path, precision):
    cfg = replace(micro_config(), precision=precision)
    a = Trainer(cfg)
    a.run(3)
    saved = save_checkpoint(a, tmp_path)
    later = a.run(3)
    b = Trainer(cfg)
    assert not parameters_equal(a.model, b.model)
    scan = resume(b, tmp_path)
    assert (scan.step, scan.rejected, b.steps_done) == (3, (), 3)
    assert b.run(3) == later
    assert parameters_equal(a.model, b.model) and digest(flat_state(a)) == digest(flat_state(b))
    assert saved.step == 3 and saved.bytes > 0


def test_without_the_rng_the_resume_drifts(tmp_path):
    """The dropout generator is state too: restore everything but it, and the losses differ."""
    a = Trainer(micro_config())
    a.run(2)
    save_checkpoint(a, tmp_path)
    later = a.run(2)
    b = Trainer(micro_config())
    resume(b, tmp_path)
    torch.manual_seed(123)
    assert b.run(2) != later


def test_commit_is_atomic_and_manifest_checks_every_file(tmp_path):
    t = Trainer(micro_config())
    t.run(1)
    saved = save_checkpoint(t, tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step_00000001"]
    manifest = json.loads((saved.path / MANIFEST).read_text())
    files = {p.name for p in saved.path.iterdir()} - {MANIFEST}
    assert set(manifest["files"]) == files and ".metadata" in files and manifest["step"] == 1
    assert all(manifest["files"][n]["sha256"] == sha256_file(saved.path / n) for n in files)


def test_each_corruption_is_detected_and_the_previous_checkpoint_used(tmp_path):
    cases = {c.kind: c for c in corruption_report(tmp_path, micro_config())}
    assert set(cases) == set(CORRUPTIONS)
    assert all(c.detected and c.used_step == 2 and c.damaged_step == 4 for c in cases.values())
    assert cases["flipped byte"].reason.startswith("checksum mismatch in __0_0.distcp")
    assert cases["truncation"].reason.startswith("truncated: __0_0.distcp has")
    assert cases["missing shard"].reason == "missing file __0_0.distcp listed in the manifest"
    assert "parameter wte.weight: checkpoint shape (35, 64), model shape (35, 32)" in cases["wrong model shape"].reason


def test_unfinished_write_is_ignored_then_cleaned(tmp_path):
    t = Trainer(micro_config())
    t.run(2)
    save_checkpoint(t, tmp_path)
    (tmp_path / "step_00000004.tmp").mkdir()
    (tmp_path / "step_00000004.tmp" / "__0_0.distcp").write_bytes(b"half")
    fresh = Trainer(micro_config())
    scan = resume(fresh, tmp_path)
    assert scan.step == 2 and scan.rejected[0].name == "step_00000004.tmp"
    assert not (tmp_path / "step_00000004.tmp").exists()


def test_no_valid_checkpoint_and_bad_load_raise_clearly(tmp_path):
    t = Trainer(micro_config())
    t.run(1)
    saved = save_checkpoint(t, tmp_path)
    damage(saved.path, "flipped byte")
    scan = latest_valid(tmp_path, t)
    assert scan.path is None and scan.rejected[0].reason.startswith("checksum mismatch")
    with pytest.raises(LabkitError, match="checkpoint step_00000001 cannot be loaded: checksum mismatch"):
        load_checkpoint(t, saved.path)
    with pytest.raises(LabkitError, match="kind must be one of"):
        damage(saved.path, "fire")


def test_a_checkpoint_of_other_precision_is_refused_by_dtype(tmp_path):
    mixed = Trainer(replace(micro_config(), precision="bf16-mixed"))
    mixed.run(1)
    save_checkpoint(mixed, tmp_path)
    scan = latest_valid(tmp_path, Trainer(micro_config()))
    assert scan.path is None
    assert "checkpoint dtype torch.bfloat16, model dtype torch.float32" in scan.rejected[0].reason


def test_a_valid_checkpoint_in_any_folder_name_is_checked(tmp_path):
    """Issue 23: a sound checkpoint copied to a folder not named step_N is accepted (it raised AttributeError)."""
    t = Trainer(micro_config())
    t.run(1)
    saved = save_checkpoint(t, tmp_path / "ck")
    moved = saved.path.rename(tmp_path / "my copy")
    assert check_checkpoint(moved, t) is None
    fresh = Trainer(micro_config())
    assert load_checkpoint(fresh, moved) == 1 and digest(flat_state(fresh)) == digest(flat_state(t))


def test_async_save_snapshots_the_state_and_stall_is_measured(tmp_path):
    t = Trainer(micro_config())
    t.run(2)
    want = digest({k: v.clone() for k, v in flat_state(t).items()})
    pending = save_checkpoint_async(t, tmp_path)
    t.run(2)  # training goes on while the write runs
    saved = pending.wait()
    fresh = Trainer(micro_config())
    load_checkpoint(fresh, saved.path)
    assert saved.step == 2 and digest(flat_state(fresh)) == want
    stall = measure_save_stall(t, tmp_path / "stall", repeats=1)
    assert stall.sync_s > 0 and stall.async_stall_s > 0 and stall.repeats == 1
    params = list(t.model.parameters())
    n_param, n_entry = sum(p.numel() for p in params), sum(v.numel() for v in t.model.state_dict().values())
    # fp32 weights (every state_dict key, the tied head included) + AdamW's two moments + a step per tensor,
    # the generator's state and the step counter (ZeRO's accounting, Rajbhandari et al. SC 2020, less gradients)
    predicted = 4 * n_entry + 8 * n_param + 4 * len(params) + torch.get_rng_state().numel() + 8
    assert stall.state_bytes == predicted
    assert predicted < stall.disk_bytes < predicted + 2048 * (len(flat_state(t)) + 4)
    assert rng_key(0) in flat_state(t)


def test_peer_memory_checkpoint_restores_a_restarted_rank_bit_identically():
    res = ldist.run(peer_worker, 2, timeout=120, steps=5, every=2)
    assert [r.restored_from for r in res] == ["own memory", "peer memory"]
    assert [r.holds_copy_of for r in res] == [1, 0]
    assert all(r.differed_before_restore and r.restored_bit_identical and r.replay_bit_identical for r in res)
    assert all(r.snapshot_step == 2 and r.failed_at_step == 5 and r.state_bytes > 0 for r in res)
