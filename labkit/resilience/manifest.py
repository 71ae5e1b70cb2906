"""Atomic commit of a checkpoint directory, its manifest of checksums, and a reader that runs no code.

A checkpoint that a crash can leave half-written is worse than none: it looks like
the newest one. The commit protocol is the classic one for crash-consistent files
(write to a temporary name, ``fsync``, ``rename``, ``fsync`` the directory; see Pillai
et al., "All File Systems Are Not Created Equal", OSDI 2014):

1. the checkpoint is written into ``step_N.tmp/``;
2. ``manifest.json`` records the step and, for every file, its size and sha256;
3. every file and the directory are ``fsync``-ed, then ``step_N.tmp/`` is renamed to
   ``step_N/`` and the parent directory is ``fsync``-ed.

A directory without ``.tmp`` therefore always holds a complete write; the checksums
catch what happens to it later (a flipped bit, a truncated or deleted file).

Nothing in a checkpoint folder is trusted: a folder others can write is untrusted input.
``manifest.json`` is JSON, checked field by field (:func:`verify`); DCP's own pickled index
(``.metadata``) is kept and checksummed for other tools but never opened by labkit, which
loads by the JSON copy of that index in the manifest (``labkit.resilience.index``); tensors are
read with ``torch.load(weights_only=True)`` only after their file's sha256 matches. The
checksums catch damage, not an attacker: whoever can write the folder can write a consistent
manifest, and so can make a run load wrong numbers, but never run code.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import stat
from pathlib import Path
from typing import Any

MANIFEST = "manifest.json"
TMP_SUFFIX = ".tmp"
# The tiny GPT's manifest is 34 KB (115 tensors); 16 MiB holds the index of ~50,000 tensors. A larger one is
# refused before it is read: a 2 GiB (sparse) manifest took 4.4 GiB of memory and 8 s to refuse when it was read.
MAX_MANIFEST_BYTES = 16 * 2**20
_SHA = re.compile(r"^[0-9a-f]{64}$")


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def remove(path: Path) -> None:
    """Remove a file, a symlink (never what it points to) or a directory tree; nothing if absent."""
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.is_dir():
        shutil.rmtree(path)


def commit(tmp: Path, step: int, index: dict[str, Any], run: dict[str, Any]) -> dict[str, Any]:
    """Write the manifest (step, run identity, DCP's index as JSON, every file's size and sha256) into ``tmp``
    and make every file in it durable; returns the manifest."""
    files = sorted(p for p in tmp.iterdir() if p.is_file() and p.name != MANIFEST)
    manifest = {"step": step, "run": run, "index": index,
                "files": {p.name: {"bytes": p.stat().st_size, "sha256": sha256_file(p)} for p in files}}  # fmt: skip
    (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1))  # the index keeps the state's order
    for p in [*files, tmp / MANIFEST, tmp]:
        _fsync(p)
    return manifest


def publish(tmp: Path, final: Path) -> None:
    """The atomic step: rename ``tmp`` to ``final`` and make the rename durable.

    A stale ``final`` from before a crash (a directory, a file or a symlink) is moved aside and
    removed first; a symlink is unlinked, never followed.
    """
    if os.path.lexists(final):
        trash = final.with_name(final.name + ".old" + TMP_SUFFIX)
        remove(trash)
        os.rename(final, trash)
        remove(trash)
    os.rename(tmp, final)
    _fsync(final.parent)


def _file_problem(path: Path, name: Any, entry: Any) -> str | None:
    if not isinstance(name, str) or name in ("", ".", "..", MANIFEST) or "/" in name or "\\" in name:
        return f"the manifest lists {name!r:.60}, which is not a plain file name"
    if not isinstance(entry, dict) or type(entry.get("bytes")) is not int or not isinstance(
            entry.get("sha256"), str) or not _SHA.match(entry["sha256"]):  # fmt: skip
        return f"the manifest's entry for {name} must be {{bytes: int, sha256: 64 hex digits}}"
    try:
        mode = os.lstat(path / name).st_mode
    except FileNotFoundError:
        return f"missing file {name} listed in the manifest"
    if not stat.S_ISREG(mode):
        return f"{name} is not a regular file (a symlink, directory or device is never read)"
    size = (path / name).stat().st_size
    if size != entry["bytes"]:
        kind = "truncated" if size < entry["bytes"] else "grown"
        return f"{kind}: {name} has {size} bytes, the manifest says {entry['bytes']}"
    if sha256_file(path / name) != entry["sha256"]:
        return f"checksum mismatch in {name} (sha256 differs from the manifest)"
    return None


def verify(path: Path) -> tuple[str | None, dict[str, Any]]:
    """(why ``path`` is not a sound checkpoint, or None; its manifest). Never raises on what it finds.

    The folder must be a real directory (not a symlink) holding a regular ``manifest.json`` of at most
    :data:`MAX_MANIFEST_BYTES` (a larger one is refused before it is read) whose every field has
    the right type, and exactly the files the manifest lists, each of its size and sha256.
    """
    if path.is_symlink() or not path.is_dir():
        return "not a directory (a symlink or a file named like a checkpoint is never followed)", {}
    m = path / MANIFEST
    if not os.path.lexists(m):
        return "no manifest.json: the write never committed", {}
    if m.is_symlink() or not m.is_file():
        return "manifest.json is not a regular file", {}
    try:
        with open(m, "rb") as f:
            data = f.read(MAX_MANIFEST_BYTES + 1) if os.fstat(f.fileno()).st_size <= MAX_MANIFEST_BYTES else None
        if data is None or len(data) > MAX_MANIFEST_BYTES:
            return f"manifest.json is over the limit of {MAX_MANIFEST_BYTES:,} bytes: refused unread", {}
        manifest = json.loads(data.decode("utf-8"))
    except (OSError, ValueError, RecursionError) as err:
        return f"manifest.json is unreadable ({type(err).__name__})", {}
    if not isinstance(manifest, dict) or not isinstance(manifest.get("files"), dict) or type(
            manifest.get("step")) is not int or not isinstance(manifest.get("run"), dict):  # fmt: skip
        return "manifest.json must be an object with step (int), run (object) and files (object)", {}
    for name, entry in sorted(manifest["files"].items(), key=lambda kv: str(kv[0])):
        if problem := _file_problem(path, name, entry):
            return problem, manifest
    unlisted = sorted(p.name for p in path.iterdir() if p.name != MANIFEST and p.name not in manifest["files"])
    if unlisted:
        return f"{unlisted[0]} is in the checkpoint but not in its manifest", manifest
    return None, manifest
