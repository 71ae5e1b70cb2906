"""The trusted side's tools: read a record strictly, and name what went wrong in a run that did not finish.

A record comes from processes that ran the learner's code (:mod:`labkit.practice.build.records`), so a judge
reads it as untrusted data: :func:`field` and :func:`tensor` check each value's type and shape and raise
:class:`BadRecord` otherwise, which :func:`labkit.practice.build.harness.judge_record` turns into one failed
case (a malformed or doubled record fails, it never crashes the grader). :func:`failure_case` names a run that
raised, hung or crashed from the evidence in the record: where each rank was blocked (its op log), which
collectives each rank called, and torch's own message from the rank's stderr, quoted.
"""

from __future__ import annotations

import re
from typing import Any

import torch

from labkit.practice.build.records import COLLECTIVES
from labkit.practice.coding import Case

RECV_RECV = "recv/recv deadlock"
SEND_SEND = "send/send deadlock"
SOME_RANKS = "a collective only some ranks call"
MISMATCH = "collective mismatch"
_TORCH_LINES = (r"[^\n]*Is there a distributed collective mismatch[^\n]*", r"what\(\):[^\n]*", r"RuntimeError:[^\n]*",
                r"terminate called[^\n]*")


class BadRecord(ValueError):
    """The record is not what the exercise's rank functions write: the judge fails it as one case."""


def field(obj: Any, key: str | int, kind: type | tuple[type, ...], length: int | None = None) -> Any:
    """``obj[key]``, which must be of ``kind`` (and have ``length`` items); :class:`BadRecord` otherwise."""
    try:
        value = obj[key]
    except (KeyError, IndexError, TypeError):
        raise BadRecord(f"no {key!r} in the record") from None
    if kind is float:
        kind = (float, int)
    if isinstance(value, bool) and kind in (int, (float, int)) or not isinstance(value, kind):
        raise BadRecord(f"{key!r} must be {getattr(kind, '__name__', kind)} (got {type(value).__name__})")
    if length is not None and len(value) != length:
        raise BadRecord(f"{key!r} must have {length} entries (got {len(value)})")
    return value


def tensor(obj: Any, key: str | int, shape: tuple[int, ...] | None = None) -> torch.Tensor:
    """``obj[key]`` as a float tensor of ``shape`` (None: any), finite; :class:`BadRecord` otherwise."""
    value = field(obj, key, torch.Tensor)
    if shape is not None and tuple(value.shape) != tuple(shape):
        raise BadRecord(f"{key!r} must have shape {tuple(shape)} (got {tuple(value.shape)})")
    if not value.is_floating_point():
        raise BadRecord(f"{key!r} must be a float tensor (got {value.dtype})")
    return value.detach().to(torch.float64)


def ranks_of(run: dict, world: int) -> list[Any]:
    """The per-rank reports of one finished run: exactly ``world`` of them."""
    return field(run, "ranks", list, world)


def torch_says(run: dict) -> str:
    """torch's or gloo's own explanation from the ranks' stderr, quoted (the first one found), else ""."""
    texts = run.get("stderr") if isinstance(run, dict) else None
    for text in texts if isinstance(texts, list) else []:
        if not isinstance(text, str):
            continue
        for pattern in _TORCH_LINES:
            if m := re.search(pattern, text):
                line = re.sub(r"^\s*what\(\):\s*", "", m[0])
                return re.sub(r"\[enforce fail at [^\]]*\]\s*", "", line).strip()[:300]
    return ""


def blocked(run: dict) -> dict[int, tuple[str, int]]:
    """rank -> (call, peer) it had started and not finished when the run stopped (from its op log)."""
    out = {}
    ops = run.get("ops") if isinstance(run, dict) else None
    for rank, log in enumerate(ops if isinstance(ops, list) else []):
        pending = [op for op in log if isinstance(op, list) and len(op) == 5 and op[4] is None]
        if pending and isinstance(pending[-1][0], str):
            out[rank] = (pending[-1][0].removesuffix(".wait"), int(pending[-1][1]))
    return out


def collectives(run: dict) -> list[list[str]]:
    """Each rank's sequence of collective calls (names), from its op log."""
    ops = run.get("ops") if isinstance(run, dict) else None
    return [[op[0] for op in log if isinstance(op, list) and op and op[0] in COLLECTIVES]
            for log in (ops if isinstance(ops, list) else [])]  # fmt: skip


def _uneven(run: dict) -> str:
    """Which rank called a collective that another rank did not ("" when every rank called the same ones)."""
    seqs = collectives(run)
    other = next((r for r in range(1, len(seqs)) if seqs[r] != seqs[0]), None)
    if other is None:
        return ""
    a, b = seqs[0], seqs[other]
    j = next((j for j, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
    if j < min(len(a), len(b)):
        return f"rank 0's collective number {j + 1} is {a[j]} where rank {other}'s is {b[j]}"
    more, less, extra = (0, other, a[j]) if len(a) > len(b) else (other, 0, b[j])
    return f"rank {more} called {extra} (its collective number {j + 1}), which rank {less} never called"


def failure_case(run: dict, name: str, hints: dict[str, tuple[str, ...]] | None = None) -> Case | None:
    """The failed case for a run that did not finish (None if it did): its diagnosis named from the evidence.

    ``hints`` maps a diagnosis (:data:`RECV_RECV`, :data:`SEND_SEND`, :data:`SOME_RANKS`, "raised", "timeout")
    to its hint steps (a gloo abort for a :data:`MISMATCH` takes :data:`SOME_RANKS`'s).
    """
    failure = run.get("failure") if isinstance(run, dict) else None
    if failure is None:
        return None
    hints = hints or {}
    if not isinstance(failure, dict) or not isinstance(failure.get("message", ""), str):
        return Case(name, False, "the run's record is malformed (its failure entry is not a report)")
    kind, message = failure.get("kind"), failure.get("message", "")
    where = failure.get("learner_frames") or ""
    quote = torch_says(run)
    said = f'; torch says: "{quote}"' if quote else ""
    stuck = blocked(run)
    uneven = _uneven(run)
    if uneven and (kind in ("timeout", "died") or quote or any(c in COLLECTIVES for c, _ in stuck.values())):
        return Case(name, False, f"{SOME_RANKS}: {uneven}; a collective returns only when every rank of the group "
                    f"has called it{said}", hints.get(SOME_RANKS, ()))
    if "collective mismatch" in quote:
        return Case(name, False, f"{MISMATCH}: gloo aborted a rank ({message}) because the ranks' collectives "
                    f"differ in size or kind at the same point{said}", hints.get(SOME_RANKS, ()))
    if kind == "timeout" and stuck and len(stuck) == len(run.get("ops", [])):
        calls = {c for c, _ in stuck.values()}
        place = ", ".join(f"rank {r} in {c} from rank {p}" if c in ("recv", "irecv") else f"rank {r} in {c} to "
                          f"rank {p}" for r, (c, p) in sorted(stuck.items()))  # fmt: skip
        if calls <= {"recv", "irecv"}:
            return Case(name, False, f"{RECV_RECV}: {place}: every rank is blocked in a receive, waiting for a "
                        "message its peer only sends after its own receive returns", hints.get(RECV_RECV, ()))
        if calls <= {"send", "isend"}:
            return Case(name, False, f"{SEND_SEND}: {place}: every rank is blocked in a send that completes only "
                        "when the peer receives, and the peer is sending too", hints.get(SEND_SEND, ()))
        return Case(name, False, f"the ranks hung: {place}; {message}", hints.get("timeout", ()))
    if kind == "timeout":
        return Case(name, False, message, hints.get("timeout", ()))
    return Case(name, False, f"{message}" + (f" (at {where})" if where else "") + said, hints.get("raised", ()))
