"""Checkpoints under attack and under damage: no content runs code; each fault resumes bit-exactly or is refused.

Issue 24. Every case plants its fault in the newer of two checkpoints (steps 2 and 4) of the
same run, re-hashing the manifest where an attacker would (a checksum is not a signature), and
asserts the exact outcome: the step resumed, its state bit for bit, and the reason given.
"""

from __future__ import annotations

import json
import pickle
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from labkit.resilience.checkpoint import save_checkpoint, save_checkpoint_async
from labkit.resilience.manifest import MANIFEST, sha256_file
from labkit.resilience.scan import check_checkpoint, latest_valid, resume
from labkit.resilience.state import digest, flat_state
from labkit.resilience.worker import micro_config
from labkit.rig.train import Trainer

SHARD = "__0_0.distcp"


def _str(s: str) -> bytes:
    raw = s.encode()
    return b"\x8c" + bytes([len(raw)]) + raw  # SHORT_BINUNICODE


def call_payload(module: str, name: str, arg: str) -> bytes:
    """A protocol-4 pickle that calls module.name(arg) on load: GLOBAL by STACK_GLOBAL (dotted names resolve)."""
    return b"\x80\x04" + _str(module) + _str(name) + b"\x93" + _str(arg) + b"\x85R."


def payloads(mark: Path) -> dict[str, bytes]:
    shell = f"touch {mark}"
    code = f"open({str(mark)!r}, 'w').write('ran')"
    return {
        "os.system through DCP metadata's imports": call_payload("torch.distributed.checkpoint.metadata", "os.system",
                                                                 shell),
        "torch.serialization.os.system": call_payload("torch.serialization", "os.system", shell),
        "dotted torch.os.system": call_payload("torch", "os.system", shell),
        "plain os.system": call_payload("os", "system", shell),
        "builtins.exec REDUCE": call_payload("builtins", "exec", code),
        "REDUCE through a DCP class's module": call_payload("torch.distributed.checkpoint.metadata",
                                                            "torch.serialization.os.system", shell),
    }


def rehash(path: Path, edit=None) -> None:
    """Rewrite ``path``'s manifest as an attacker would: fresh sizes and sha256 of the files, then ``edit``."""
    m = json.loads((path / MANIFEST).read_text())
    for name in m["files"]:
        if (path / name).is_file():
            m["files"][name] = {"bytes": (path / name).stat().st_size, "sha256": sha256_file(path / name)}
    if edit:
        edit(m)
    (path / MANIFEST).write_text(json.dumps(m))


@pytest.fixture
def two(tmp_path):
    """A run with checkpoints at steps 2 and 4 under ``root``; the digests of its state at both."""
    t = Trainer(micro_config())
    t.run(2)
    save_checkpoint(t, tmp_path / "root")
    d2 = digest(flat_state(t))
    t.run(2)
    save_checkpoint(t, tmp_path / "root")
    return tmp_path / "root", {2: d2, 4: digest(flat_state(t))}


def resumed(root: Path) -> tuple[int | None, str, tuple]:
    fresh = Trainer(micro_config())
    scan = resume(fresh, root)
    return scan.step, digest(flat_state(fresh)), scan.rejected


def test_each_payload_runs_under_plain_pickle(tmp_path):
    """The payloads are live: plain pickle.loads runs every one (so the next test can fail)."""
    for label, data in payloads(tmp_path / "mark").items():
        pickle.loads(data)
        assert (tmp_path / "mark").exists(), label
        (tmp_path / "mark").unlink()


def test_no_metadata_payload_runs_on_scan_or_resume(two):
    root, digests = two
    mark = root.parent / "mark"
    for label, data in payloads(mark).items():
        path = root / "step_00000004"
        (path / ".metadata").write_bytes(data)
        rehash(path)
        assert latest_valid(root, Trainer(micro_config())).step == 4, label
        step, dig, _ = resumed(root)
        assert not mark.exists(), label
        assert (step, dig) == (4, digests[4]), label  # labkit never opens DCP's pickle: the JSON index is used


def test_a_pickle_payload_in_a_tensor_file_is_refused_at_load_and_the_older_step_used(two):
    root, digests = two
    mark = root.parent / "mark"
    shard = root / "step_00000004" / SHARD
    data = bytearray(shard.read_bytes())
    payload = call_payload("os", "system", f"touch {mark}")
    data[: len(payload)] = payload
    shard.write_bytes(bytes(data))
    rehash(shard.parent)
    step, dig, rejected = resumed(root)
    assert not mark.exists() and (step, dig) == (2, digests[2])
    assert rejected[0].name == "step_00000004" and "cannot be loaded" in rejected[0].reason


def _drop_shard_entry(m):
    del m["files"][SHARD]


def _flip(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 1
    path.write_bytes(bytes(data))


CASES = {
    "unlisted shard, a bit flipped": (lambda p: (_flip(p / SHARD), rehash(p, _drop_shard_entry)),
                                      "__0_0.distcp is in the checkpoint but not in its manifest"),
    "unlisted shard, deleted": (lambda p: ((p / SHARD).unlink(), rehash(p, _drop_shard_entry)),
                                "is read from '__0_0.distcp', which the manifest does not list"),
    "files is a list": (lambda p: rehash(p, lambda m: m.update(files=list(m["files"]))), "manifest.json must be"),
    "manifest.json is a directory": (lambda p: ((p / MANIFEST).unlink(), (p / MANIFEST).mkdir()),
                                     "manifest.json is not a regular file"),
    "size as text": (lambda p: rehash(p, lambda m: m["files"][SHARD].update(bytes="12")), "must be {bytes: int"),
    "step as text": (lambda p: rehash(p, lambda m: m.update(step="4")), "step (int)"),
    "a file listed by a path": (lambda p: rehash(p, lambda m: m["files"].update({"../x": m["files"][SHARD]})),
                                "not a plain file name"),
    "an unlisted extra file": (lambda p: (p / "extra.distcp").write_bytes(b"x"), "extra.distcp is in the checkpoint"),
    "a listed file that is a symlink": (lambda p: ((p / SHARD).rename(p.parent.parent / "out"),
                                                   (p / SHARD).symlink_to(p.parent.parent / "out")),
                                        "is not a regular file"),
    "index: a tensor as large as memory": (lambda p: rehash(p, lambda m: m["index"]["tensors"]["rng/torch/rank0"]
                                                            .update(size=[10**15])), "needs more bytes"),
    "index: a byte range past the file": (lambda p: rehash(p, lambda m: m["index"]["storage"][0]
                                                           .__setitem__(5, 10**9)), "which has"),
    "index: an unknown dtype": (lambda p: rehash(p, lambda m: m["index"]["tensors"]["progress/steps_done"]
                                                 .update(dtype="object")), "dtype of progress/steps_done must be"),
    "index missing": (lambda p: rehash(p, lambda m: m.pop("index")), "index: must be an object"),
}


@pytest.mark.parametrize("case", CASES)
def test_each_corruption_falls_back_bit_exactly_with_its_reason(two, case):
    root, digests = two
    plant, reason = CASES[case]
    plant(root / "step_00000004")
    step, dig, rejected = resumed(root)
    assert (step, dig) == (2, digests[2])
    assert rejected[0].name == "step_00000004" and reason in rejected[0].reason, rejected[0].reason


def test_an_older_state_under_a_newer_name_is_refused_by_its_own_step(two):
    root, digests = two
    shutil.copytree(root / "step_00000002", root / "step_00000006")
    rehash(root / "step_00000006", lambda m: m.update(step=6))
    step, dig, rejected = resumed(root)
    assert (step, dig) == (4, digests[4])
    assert rejected[0].reason == "the state's own step is 2, the manifest says 6"


def test_entries_named_like_checkpoints_are_skipped_never_raised(two):
    root, digests = two
    (root / "step_00000007").write_text("not a checkpoint")
    outside = root.parent / "elsewhere"
    shutil.copytree(root / "step_00000004", outside)
    (root / "step_00000008").symlink_to(outside)
    (root / "step_00000009").symlink_to(root.parent / "dangling")
    step, dig, rejected = resumed(root)
    assert (step, dig) == (4, digests[4])
    assert {r.name for r in rejected} == {"step_00000007", "step_00000008", "step_00000009"}
    assert all(r.reason.startswith("not a directory") for r in rejected)
    assert outside.is_dir() and (outside / SHARD).exists()


def test_another_runs_checkpoint_is_refused_by_name(two):
    root, digests = two
    other = Trainer(micro_config(seed=1))
    other.run(6)
    save_checkpoint(other, root)
    step, dig, rejected = resumed(root)
    assert (step, dig) == (4, digests[4])
    assert rejected[0].reason == "another run's checkpoint: its seed is 1, this run's is 0"
    lr = Trainer(replace(micro_config(), lr=1e-3))
    lr.run(6)
    save_checkpoint(lr, root)
    assert latest_valid(root, Trainer(micro_config())).rejected[0].reason.startswith(
        "another run's checkpoint: its config is")


def test_saves_never_follow_a_symlink_out_of_the_root_nor_leave_tmp(tmp_path):
    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (root / "step_00000001.tmp").symlink_to(outside)  # planted tmp
    (root / "step_00000002").symlink_to(outside)  # a stale final that is a symlink
    t = Trainer(micro_config())
    for _ in range(2):
        t.run(1)
        save_checkpoint(t, root)
    (root / "step_00000003").write_text("a stale file")
    t.run(1)
    save_checkpoint_async(t, root).wait()
    assert list(outside.iterdir()) == []
    assert sorted(p.name for p in root.iterdir()) == ["step_00000001", "step_00000002", "step_00000003"]
    assert check_checkpoint(root / "step_00000003", t) is None


def test_a_failed_save_leaves_no_tmp(tmp_path, monkeypatch):
    t = Trainer(micro_config())
    t.run(1)

    def full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("labkit.resilience.checkpoint.commit", full)
    with pytest.raises(OSError):
        save_checkpoint(t, tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_the_manifest_records_step_identity_and_every_file_read(tmp_path):
    t = Trainer(micro_config())
    t.run(1)
    saved = save_checkpoint(t, tmp_path)
    m = json.loads((saved.path / MANIFEST).read_text())
    assert m["step"] == 1 and set(m["run"]) == {"seed", "data", "config"} and m["run"]["seed"] == 0
    read = {row[3] for row in m["index"]["storage"]}
    assert read <= set(m["files"]) and set(m["files"]) == {p.name for p in saved.path.iterdir()} - {MANIFEST}
    assert set(m["index"]["tensors"]) == set(flat_state(t))
    assert (saved.path / ".metadata").is_file()  # DCP's pickle is kept and checksummed, never opened


@pytest.mark.parametrize("phase", ["written", "manifest"])
def test_a_kill_mid_save_beside_planted_symlinks_resumes_bit_exactly_and_writes_nothing_outside(tmp_path, phase):
    """A SIGKILL during the save of step 4, with step_4's .tmp and final names planted as symlinks out of the root."""
    from labkit.resilience.crash import KillPoint, crash_and_resume, reference_run

    ref = reference_run(tmp_path / "ref", 6, 2)
    root, outside = tmp_path / "run", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (root / "step_00000004.tmp").symlink_to(outside)
    (root / "step_00000004").symlink_to(outside)
    outcome, _ = crash_and_resume(root, ref, KillPoint(4, phase), 2)
    assert outcome.ok and outcome.tmp_cleaned and outcome.resumed_from == 2
    assert list(outside.iterdir()) == []
