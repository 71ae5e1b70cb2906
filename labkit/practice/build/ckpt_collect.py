"""The untrusted side of 06.build.sharded_ckpt: the learner's save and load run in child processes only.

Three kinds of run, each through :func:`labkit.practice.build.records.ranks`, each returning plain data:

* a round trip per world size: steps 1 then 2 saved; the calls the save of step 2 makes (``torch.save``, the one
  of the rank's own state logged as "shard", ``os.fsync``, ``os.replace``/``os.rename``, collectives) are spied,
  in order, with the paths they touched;
* real SIGKILLs: a rank dies half-way through writing its shard of step 2 (``os.kill(getpid(), SIGKILL)``: no
  handler, no flush, no cleanup); the launcher stops the others soon after, as a real job's would;
* one child that runs every ``load_sharded`` the judge needs (each folder, each rank), with ``torch.load`` spied,
  and the untrusted-folder test: a shard replaced by a pickle that creates a file when unpickled.
"""

from __future__ import annotations

import builtins
import io
import os
import shutil
import signal
import time
import zipfile
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from labkit.practice.build import records
from labkit.practice.build.rank_record import attempt
from labkit.practice.build.records import load_module

COLLECTIVES = ("barrier", "all_gather_object", "gather_object", "broadcast_object_list", "all_reduce", "all_gather",
               "broadcast")
TIMEOUT_S = 20.0


def state_of(params: dict[str, Any], rank: int, step: int) -> dict[str, torch.Tensor]:
    """Rank ``rank``'s training state at ``step``: fp32 weights, bf16 moments, the step (sizes drawn per run)."""
    g = torch.Generator().manual_seed(int(params["seed"]) * 7 + 100 * step + rank)
    return {"w": torch.randn(int(params["numel"]), generator=g),
            "m": torch.randn(int(params["numel"]) // 2 + 1, generator=g).to(torch.bfloat16), "step": torch.tensor(step)}


def _paths(kind: str, args: tuple) -> list[str]:
    if kind == "save" and len(args) > 1:
        return [str(getattr(args[1], "name", args[1]))]
    return [str(a) for a in args[:2]] if kind == "rename" else []


class Spy:
    """Records, in order, the calls to torch.save, os.fsync, os.replace/os.rename and the collectives."""

    def __init__(self, state: object = None) -> None:
        self.events: list[list] = []
        self.state = state  # torch.save of this object is logged as "shard"
        self._real: list[tuple[object, str, object]] = []

    def wrap(self, owner: object, name: str, kind: str, before=None) -> None:  # noqa: ANN001 - any callable
        real = getattr(owner, name)

        def spy(*args, **kw):  # noqa: ANN002, ANN003, ANN202 - the wrapped call's own signature
            mine = kind == "save" and args and args[0] is self.state  # the rank's own state: its shard
            self.events.append(["shard" if mine else kind, _paths(kind, args)])
            return before(real, *args, **kw) if before is not None else real(*args, **kw)

        self._real.append((owner, name, real))
        setattr(owner, name, spy)

    def __enter__(self) -> Spy:
        self.wrap(torch, "save", "save")
        for name in ("fsync", "fdatasync"):
            self.wrap(os, name, "fsync")
        for name in ("replace", "rename"):
            self.wrap(os, name, "rename")
        for name in COLLECTIVES:
            self.wrap(dist, name, "collective")
        return self

    def __exit__(self, *exc: object) -> None:
        for owner, name, real in reversed(self._real):
            setattr(owner, name, real)


def round_trip_rank(rank: int, world: int, log: records.OpLog, path: str, params: dict[str, Any],
                    jobs: list[list[str]]) -> list[dict[str, Any]]:
    """(Runs in a rank.) Per (module, folder) of ``jobs``: save steps 1 and 2; the calls made by the save of step 2."""
    out = []
    for module, folder in jobs:
        loaded = attempt(module, lambda module=module: {"m": load_module(module)})
        if "m" not in loaded:
            out.append(loaded)
            continue
        m = loaded["m"]
        with records.recording(log):
            first = attempt(module, lambda m=m, folder=folder: _save(m, state_of(params, rank, 1), folder, 1))
            if "failure" in first:
                out.append(first)
                continue
            spy = Spy(state_of(params, rank, 2))
            with spy:
                second = attempt(module, lambda m=m, folder=folder, spy=spy: _save(m, spy.state, folder, 2))
        out.append(second if "failure" in second else {"events": spy.events[:400]})
    return out


def _save(m: Any, state: dict[str, torch.Tensor], folder: str, step: int) -> dict:
    m.save_sharded(state, folder, step)
    return {}


def _torn(real, obj, f, *args, delay: float = 0.0, **kw) -> None:  # noqa: ANN001 - torch.save's arguments
    """torch.save that writes half of its bytes, then dies by SIGKILL (no handler, no flush, no cleanup)."""
    time.sleep(delay)
    buf = io.BytesIO()
    real(obj, buf, *args, **kw)
    half = buf.getvalue()[: len(buf.getvalue()) // 2]
    if hasattr(f, "write"):
        f.write(half)
        f.flush()
    else:
        with open(f, "wb") as out:
            out.write(half)
    os.kill(os.getpid(), signal.SIGKILL)


def kill_rank(rank: int, world: int, log: records.OpLog, path: str, params: dict[str, Any], folder: str,
              victim: int, delay: float) -> str:
    """(Runs in a rank.) Save step 1; then step 2, rank ``victim`` killed half-way through its shard."""
    m = load_module(path)
    with records.recording(log):
        m.save_sharded(state_of(params, rank, 1), folder, 1)
        dist.barrier()
        if rank == victim:
            Spy().wrap(torch, "save", "save", before=lambda real, *a, **k: _torn(real, *a, delay=delay, **k))
        m.save_sharded(state_of(params, rank, 2), folder, 2)
    return "saved"


def _load_all(m: Any, module: str, folder: str, world: int) -> list[Any]:
    out = []
    for r in range(world):
        got = attempt(module, lambda r=r: {"loaded": m.load_sharded(folder, r)})
        if "loaded" in got:
            value = got["loaded"]
            ok = isinstance(value, tuple | list) and len(value) == 2 and isinstance(value[1], dict)
            got = {"step": value[0], "state": dict(value[1])} if ok else {"none": value is None}
        out.append(got)
    return out


def _evil(m: Any, module: str, folder: str, world: int) -> dict[str, Any]:
    """Every zip file of a copy of ``folder`` replaced by a pickle that creates a file when unpickled."""
    copy = Path(folder).with_name(Path(folder).name + "-evil")
    shutil.copytree(folder, copy)
    marker = copy.parent / f"{copy.name}.pwned"

    class Evil:
        def __reduce__(self):  # noqa: ANN204 - pickle's protocol
            return builtins.open, (str(marker), "w")

    for f in copy.rglob("*"):
        if f.is_file() and zipfile.is_zipfile(f):
            torch.save({"w": Evil()}, f)
    for r in range(world):
        attempt(module, lambda r=r: {"x": m.load_sharded(copy, r)})
    return {"ran": marker.exists()}


def load_rank(rank: int, world: int, log: records.OpLog, path: str, jobs: list[dict[str, Any]]) -> list[dict]:
    """(Runs in one child.) Per job ``{"module", "folders": {label: [folder, world]}, "evil": label}``: every
    rank's load of every folder, the evil copy's outcome and how torch.load was called."""
    return [_load_job(job) for job in jobs]


def _load_job(job: dict[str, Any]) -> dict[str, Any]:
    module = job["module"]
    loaded = attempt(module, lambda: {"m": load_module(module)})
    if "m" not in loaded:
        return loaded
    seen: list[Any] = []
    real = torch.load
    torch.load = lambda *a, **k: (seen.append(k.get("weights_only", "default")), real(*a, **k))[1]
    try:
        loads = {label: _load_all(loaded["m"], module, f, w) if Path(f).exists() else []
                 for label, (f, w) in job["folders"].items()}  # fmt: skip
        f, w = job["folders"][job["evil"]]
        evil = _evil(loaded["m"], module, f, w) if Path(f).exists() else {"ran": False, "missing": True}
    finally:
        torch.load = real
    return {"loads": loads, "evil": evil, "weights_only": [str(s) for s in seen[:50]]}
