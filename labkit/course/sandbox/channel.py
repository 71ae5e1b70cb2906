"""The pipe between the grader and the sandboxed child: length-prefixed frames, read back as plain data only.

Requests go one way (grader -> child) and may be pickled: the grader's own data, unpickled where the
learner's code runs anyway. Replies come back the other way and are never unpickled: a reply is JSON, or
``torch.save`` bytes read with ``torch.load(weights_only=True)`` (tensors, numbers, strings, lists, tuples,
sets, dicts; any other class is refused), at most :data:`MAX_REPLY_BYTES`. Every reply carries the number of
the request it answers, so a reply written twice, early or out of turn is caught, and anything else on the pipe
(a frame of unknown kind, a short read, a payload that does not decode, a reply past its deadline) is a
:class:`ChannelError`, which the grader turns into a failed call, never a crash.
"""

from __future__ import annotations

import io
import json
import os
import pickle
import select
import time
from typing import Any

MAX_REPLY_BYTES = 64 * 2**20  # a record of a build-it run is a few MB at most; an answer a few KB
HEADER = 5  # one byte of kind, four of length (big-endian)


class ChannelError(RuntimeError):
    """The child's reply is missing, malformed or out of turn (its code wrote something else, or died)."""


class Ended(ChannelError):
    """The pipe closed: the child ended (exited, was killed) before its reply was whole."""


class ReplyTimeout(ChannelError):
    """No reply before the deadline: the learner's code is still running (a loop, a wait that never ends)."""


def _frame(kind: bytes, payload: bytes) -> bytes:
    return kind + len(payload).to_bytes(4, "big") + payload


def send_request(fd: int, message: dict, deadline: float | None = None) -> None:
    """Grader side: pickle ``message`` (trusted data) and write it whole, before ``deadline`` if one is given
    (a child that stopped reading must not block the grader)."""
    _write_all(fd, _frame(b"P", pickle.dumps(message)), deadline)


def read_request(fd: int) -> dict | None:
    """Child side: the next request, or None when the grader closed the pipe."""
    head = _read_exact(fd, HEADER, None)
    if head is None:
        return None
    body = _read_exact(fd, int.from_bytes(head[1:], "big"), None)
    return None if body is None else pickle.loads(body)  # noqa: S301 - written by the grader, not the learner


def send_reply(fd: int, seq: int, message: dict) -> None:
    """Child side: JSON when the message is plain JSON data, else torch bytes (tensors, sets, tuples)."""
    message = {"seq": seq, **message}
    try:
        frame = _frame(b"J", json.dumps(message, allow_nan=True).encode())
    except (TypeError, ValueError):
        import torch

        buf = io.BytesIO()
        torch.save(plain(message), buf)
        frame = _frame(b"T", buf.getvalue())
    _write_all(fd, frame)


def read_reply(fd: int, seq: int, deadline: float) -> dict:
    """Grader side: the reply to request ``seq``, read as plain data before ``deadline`` (time.monotonic)."""
    head = _read_exact(fd, HEADER, deadline)
    if head is None:
        raise Ended("the sandboxed process ended without replying")
    kind, size = head[:1], int.from_bytes(head[1:], "big")
    if kind not in (b"J", b"T"):
        raise ChannelError(f"the reply is not a frame of this channel (kind byte {kind!r})")
    if size > MAX_REPLY_BYTES:
        raise ChannelError(f"the reply is {size:,} bytes, over the limit of {MAX_REPLY_BYTES:,}")
    body = _read_exact(fd, size, deadline)
    if body is None:
        raise Ended("the reply was cut short (the sandboxed process ended mid-write)")
    try:
        if kind == b"J":
            message = json.loads(body)
        else:
            import warnings

            import torch

            with warnings.catch_warnings():  # torch warns about a forged pickle before refusing it
                warnings.simplefilter("ignore")
                message = torch.load(io.BytesIO(body), weights_only=True)
    except Exception as err:  # noqa: BLE001 - whatever the child wrote, it is not a reply
        raise ChannelError(f"the reply could not be read as plain data ({type(err).__name__})") from None
    if not isinstance(message, dict) or message.get("seq") != seq:
        got = message.get("seq") if isinstance(message, dict) else type(message).__name__
        raise ChannelError(f"the reply answers request {got!r}, not {seq} (a reply written twice or forged)")
    return message


def plain(value: Any, depth: int = 0) -> Any:
    """The value as types ``torch.load(weights_only=True)`` accepts: numpy scalars and arrays become Python
    numbers and tensors, tensors plain dense copies; anything else is left for the grader to refuse."""
    if depth > 50:
        return value
    if isinstance(value, dict):
        return {plain(k, depth + 1): plain(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):  # a namedtuple or a subclass: its base type
        items = [plain(v, depth + 1) for v in value]
        return items if isinstance(value, list) else tuple(items) if isinstance(value, tuple) else set(items)
    kind = type(value).__module__
    if kind == "numpy":
        import torch

        return value.item() if getattr(value, "ndim", 1) == 0 else torch.from_numpy(value.copy())
    if kind.startswith("torch") and hasattr(value, "detach"):
        return value.detach().clone()  # a Parameter or a view of a larger storage: a plain tensor of its own
    return value


def _write_all(fd: int, data: bytes, deadline: float | None = None) -> None:
    view = memoryview(data)
    while view:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([], [fd], [], left)[1]:
                raise ReplyTimeout("the sandboxed process stopped reading its requests")
            try:
                view = view[os.write(fd, view[:65536]):]  # fd is non-blocking: a partial write, or none
            except BlockingIOError:
                pass
        else:
            view = view[os.write(fd, view):]


def _read_exact(fd: int, n: int, deadline: float | None) -> bytes | None:
    """``n`` bytes from ``fd``; None at end of file; ChannelError past ``deadline``."""
    chunks, got = [], 0
    while got < n:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise ReplyTimeout("no reply within the time limit")
        chunk = os.read(fd, min(n - got, 2**20))
        if not chunk:
            return None
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)
