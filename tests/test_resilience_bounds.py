"""A checkpoint's manifest and index are bounded before they are read, and chunks must tile their tensor exactly.

Issue 37: a 2 GiB sparse manifest cost 4.4 GiB of memory and 8 s before it was refused; an index chunk that did
not cover its tensor was accepted and left uninitialised memory in the parameter; a save into a symlink loop raised
a raw OSError. Cost: about 2.5 s (one micro run saved twice; the rest is pure index checking).
"""

from __future__ import annotations

import json
import time

import pytest

from labkit.errors import LabkitError
from labkit.resilience.checkpoint import save_checkpoint, save_checkpoint_async
from labkit.resilience.index import MAX_CHUNKS, from_json
from labkit.resilience.manifest import MANIFEST, MAX_MANIFEST_BYTES, verify
from labkit.resilience.scan import check_checkpoint, load_checkpoint, resume
from labkit.resilience.state import digest, flat_state
from labkit.resilience.worker import micro_config
from labkit.rig.train import Trainer

KEY = "model/wte.weight"  # 35 x 32 in the micro run


def test_a_sparse_2_gib_manifest_is_refused_unread(tmp_path):
    (tmp_path / MANIFEST).write_bytes(b"")
    with open(tmp_path / MANIFEST, "r+b") as f:
        f.truncate(2 * 2**30)  # sparse: no disk, but 2 GiB to whoever reads it
    t0 = time.monotonic()
    reason, manifest = verify(tmp_path)
    assert reason == f"manifest.json is over the limit of {MAX_MANIFEST_BYTES:,} bytes: refused unread"
    assert manifest == {} and time.monotonic() - t0 < 1.0


def test_a_deeply_nested_manifest_is_a_reason_not_a_raise(tmp_path):
    (tmp_path / MANIFEST).write_text("[" * 200_000)
    assert verify(tmp_path)[0] == "manifest.json is unreadable (RecursionError)"


def _index(chunks: list, size: tuple[int, ...] = (4, 6)) -> dict:
    storage = [["w", list(c[0]), None, "f", 0, 8] for c in chunks]
    return {"tensors": {"w": {"dtype": "float32", "size": list(size), "chunks": [[list(o), list(s)] for o, s in
                                                                               chunks]}}, "storage": storage}


@pytest.mark.parametrize("chunks, why", [
    ([((0, 0), (2, 6))], r"hold 12 elements, its size \[4, 6\] has 24"),  # half the rows missing
    ([((0, 0), (4, 3)), ((0, 3), (4, 4))], "lies outside its size"),  # past the last column
    ([((0, 0), (3, 6)), ((1, 0), (1, 6)), ((3, 0), (1, 6)), ((3, 0), (0, 6))], "hold 30 elements"),
    ([((0, 0), (3, 6)), ((2, 0), (1, 6))], r"chunks \[0, 0\] and \[2, 0\] of w overlap"),  # the right volume
])
def test_chunks_that_do_not_tile_their_tensor_are_refused(chunks, why):
    with pytest.raises(LabkitError, match=why):
        from_json(_index(chunks), {"f": 10_000})


def test_chunks_that_tile_are_accepted_and_too_many_are_refused():
    grid = [((r, c), (2, 3)) for r in (0, 2) for c in (0, 3)]
    assert len(from_json(_index(grid), {"f": 10_000}).state_dict_metadata["w"].chunks) == 4
    assert from_json(_index([((), ())], size=()), {"f": 10_000}).state_dict_metadata["w"].size == ()
    many = [((r, 0), (1, 1)) for r in range(MAX_CHUNKS + 1)]
    with pytest.raises(LabkitError, match=f"more than the limit of {MAX_CHUNKS}"):
        from_json(_index(many, size=(MAX_CHUNKS + 1, 1)), {"f": 10_000})


def test_a_real_index_whose_chunk_covers_part_of_a_parameter_is_refused_and_the_older_step_loaded(tmp_path):
    t = Trainer(micro_config())
    t.run(1)
    save_checkpoint(t, tmp_path)
    d1 = digest(flat_state(t))
    t.run(1)
    newest = save_checkpoint(t, tmp_path).path
    m = json.loads((newest / MANIFEST).read_text())
    assert m["index"]["tensors"][KEY]["chunks"] == [[[0, 0], [35, 32]]]
    m["index"]["tensors"][KEY]["chunks"] = [[[0, 0], [20, 32]]]  # rows 20..34 would stay as torch.empty left them
    (newest / MANIFEST).write_text(json.dumps(m))  # the manifest lists no checksum of itself
    fresh = Trainer(micro_config())
    assert "they must tile the tensor exactly" in check_checkpoint(newest, fresh)
    with pytest.raises(LabkitError, match=f"cannot be loaded: index: the chunks of {KEY} hold 640 elements"):
        load_checkpoint(fresh, newest)
    scan = resume(fresh, tmp_path)
    assert scan.step == 1 and digest(flat_state(fresh)) == d1


def test_a_root_that_cannot_hold_checkpoints_is_one_line_naming_root(tmp_path):
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    (tmp_path / "file").write_text("x")
    t = Trainer(micro_config())
    cases = {tmp_path / "a": r"Too many levels of symbolic links \(a symlink loop\)",
             tmp_path / "a" / "sub": r"Too many levels of symbolic links \(a symlink loop\)",
             tmp_path / "file": "it is a file, not a folder", tmp_path / ("n" * 300): "File name too long",
             tmp_path / "a\0b": "it contains a NUL byte"}
    for root, why in cases.items():
        for save in (save_checkpoint, save_checkpoint_async):
            with pytest.raises(LabkitError, match=f"^root must be a folder labkit can create and write: {why} \\(got"):
                save(t, root)
    with pytest.raises(LabkitError, match="^root must be a folder labkit can create and write: File name too long"):
        resume(t, tmp_path / ("n" * 300))
    assert resume(t, tmp_path / "a").step is None  # a symlink is never followed: nothing to resume
