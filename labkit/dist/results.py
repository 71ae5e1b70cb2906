"""How a rank hands its result to the launcher: one file in the group's folder, written whole, read back safely.

A rank of the lab's own code returns any picklable object (``pickle``, the default). A rank that runs code the
launcher does not trust (a learner's build-it module graded by :mod:`labkit.practice.build`, a hand-in re-run by
``collect``) is read with ``untrusted=True``: the file must be at most :data:`MAX_UNTRUSTED_BYTES` and is loaded
with ``torch.load(weights_only=True)``, which builds tensors, numbers, strings, lists, tuples and dicts and
refuses every other class, so whatever the rank wrote into its file cannot run code in the launcher. A file that
is too large (refused before it is read) or not such a payload reads as the rank's error, never as a crash of the
launcher. Every report is read with its sha256 (:func:`read_sealed`): the launcher reads each rank's report when that
rank exits and checks at the end that none has changed since, so a rank that rewrites a peer's report after the
peer exited is caught. What no file can show is a rewrite between a peer's own write and its exit (it looks like
the peer's report): only keeping the ranks apart (``labkit.course``'s sandbox) closes that.
"""

from __future__ import annotations

import hashlib
import io
import os
import pickle
from pathlib import Path
from typing import Any

import torch

MAX_UNTRUSTED_BYTES = 64 * 2**20  # a graded rank returns tensors of a few KB; far above any honest report


def write(path: Path, payload: Any, untrusted: bool = False) -> None:
    """Write ``payload`` to ``path`` through a temporary file, so the launcher never reads half a result."""
    tmp = path.with_suffix(".tmp")
    if untrusted:
        buf = io.BytesIO()
        torch.save(payload, buf)
        tmp.write_bytes(buf.getvalue())
    else:
        tmp.write_bytes(pickle.dumps(payload))
    os.replace(tmp, path)


def read(path: Path, untrusted: bool = False) -> tuple:
    """The rank's report: ``("ok", result)`` or ``("error", message, traceback, when)``; ``("missing",)`` if none.

    With ``untrusted``, a report that is too large, unreadable or not of that shape is an ``"error"`` report
    saying so (the rank's code wrote something other than a result).
    """
    return read_sealed(path, untrusted)[0]


def seal(path: Path) -> str | None:
    """The sha256 of the report's bytes as they are now (at most the bound and one byte); None if none."""
    return read_sealed(path, True, parse=False)[1]


def read_sealed(path: Path, untrusted: bool = False, parse: bool = True) -> tuple[tuple, str | None]:
    """(the report, the sha256 of the bytes it was read from): a later :func:`seal` that differs shows the file
    was rewritten after it was read, which only another rank's code does (the rank itself has exited)."""
    try:
        with open(path, "rb") as f:
            if untrusted and os.fstat(f.fileno()).st_size > MAX_UNTRUSTED_BYTES:  # refused unread
                size = os.fstat(f.fileno()).st_size
                return ("error", f"its report is {size:,} bytes, over the limit of {MAX_UNTRUSTED_BYTES:,}",
                        "", 0.0), f"size {size}"
            data = f.read(MAX_UNTRUSTED_BYTES + 1) if untrusted else f.read()
    except FileNotFoundError:
        return ("missing",), None
    digest = hashlib.sha256(data).hexdigest()
    if not parse:
        return (), digest
    if not untrusted:
        return pickle.loads(data), digest
    if len(data) > MAX_UNTRUSTED_BYTES:  # grown since it was opened
        return ("error", f"its report is over the limit of {MAX_UNTRUSTED_BYTES:,} bytes", "", 0.0), digest
    return _plain(data), digest


def _plain(data: bytes) -> tuple:
    try:
        report = torch.load(io.BytesIO(data), weights_only=True)
    except Exception as err:  # noqa: BLE001 - whatever the untrusted file holds, it is not a result
        return ("error", f"its report could not be read as plain data ({type(err).__name__})", "", 0.0)
    if isinstance(report, tuple) and len(report) == 2 and report[0] == "ok":
        return report
    if (isinstance(report, tuple) and len(report) == 4 and report[0] == "error"
            and all(isinstance(x, str) for x in report[1:3]) and isinstance(report[3], int | float)):  # fmt: skip
        return ("error", report[1][:2000], report[2][-8000:], float(report[3]))
    return ("error", "its report is not a result (the rank's code wrote something else)", "", 0.0)
