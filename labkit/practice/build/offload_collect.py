"""The untrusted side of 04.build.act_offload: the learner's hooks run in a child process, raw facts come back.

For each dtype: one forward+backward of the MLP under the learner's ``FileOffload``, with its pack and unpack
watched: the gradients, the bytes on disk after forward, what pack received (parameter or not, its bytes), the
bytes of offloaded tensors still referenced after forward (by pack's handles or the hooks object), each dtype that
came back changed, the files left after backward. The judge in :mod:`labkit.practice.build.act_offload` decides.
"""

from __future__ import annotations

import gc
import tempfile
import types
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn

from labkit.practice.build import records
from labkit.practice.build.rank_record import attempt
from labkit.practice.build.records import load_module

TIMEOUT_S = 30.0


def model(params: dict[str, Any], dtype: str) -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    """The MLP, its input and the loss weights, the same in the child and in the judge."""
    torch.manual_seed(int(params["seed"]))
    width, hidden, dt = int(params["width"]), int(params["hidden"]), getattr(torch, dtype)
    net = nn.Sequential(nn.Linear(width, hidden), nn.GELU(), nn.Linear(hidden, width)).to(dt)
    return net, torch.randn(int(params["batch"]), width).to(dt), torch.randn(int(params["batch"]), width)


def backward_grads(net: nn.Module, out: torch.Tensor, weights: torch.Tensor) -> list[torch.Tensor]:
    """Backward of a weighted sum of ``out``; the parameters' gradients (then cleared for the next run)."""
    (out.float() * weights).sum().backward()
    grads = [p.grad.clone() for p in net.parameters()]
    net.zero_grad(set_to_none=True)
    return grads


def _key(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr()


def _files(folder: Path) -> list[Path]:
    return [f for f in folder.rglob("*") if f.is_file()] if folder.exists() else []


def _held(roots: list[object], keys: set[int], depth: int = 6) -> set[int]:
    """Storages among ``keys`` that a tensor reachable from ``roots`` still uses (code and modules not followed)."""
    skip = (type, types.ModuleType, types.FunctionType, types.MethodType, types.BuiltinFunctionType, str, bytes)
    found: set[int] = set()
    seen: set[int] = set()
    layer = list(roots)
    for _ in range(depth):
        nxt = []
        for obj in layer:
            if id(obj) in seen or isinstance(obj, skip):
                continue
            seen.add(id(obj))
            if isinstance(obj, torch.Tensor):
                found |= {_key(obj)} & keys
            else:
                nxt += gc.get_referents(obj)
        layer = nxt
    return found


def _run(path: str, m: Any, params: dict[str, Any], dtype: str, folder: Path) -> dict[str, Any]:
    """(In the child.) One forward+backward under the learner's hooks: the raw facts."""
    net, x, w = model(params, dtype)
    params_of = {_key(p) for p in net.parameters()}
    hooks = m.FileOffload(folder, net)
    packed: list[tuple[torch.Tensor, object]] = []
    dtypes: dict[int, torch.dtype] = {}
    lost: list[str] = []
    real_pack, real_unpack = hooks.pack_hook, hooks.unpack_hook

    def pack(t: torch.Tensor) -> object:
        handle = real_pack(t)
        packed.append((t, handle))
        dtypes[id(handle)] = t.dtype
        return handle

    def unpack(handle: object) -> torch.Tensor:
        t = real_unpack(handle)
        want = dtypes.get(id(handle))
        if want is not None and isinstance(t, torch.Tensor) and t.dtype != want:
            lost.append(f"{str(want).removeprefix('torch.')} came back as {str(t.dtype).removeprefix('torch.')}")
        return t

    hooks.pack_hook, hooks.unpack_hook = pack, unpack
    with hooks:
        out = net(x)
    on_disk = sum(f.stat().st_size for f in _files(folder))
    acts = {_key(t): t.untyped_storage().nbytes() for t, _ in packed if _key(t) not in params_of}
    kinds = [[_key(t) in params_of, int(t.untyped_storage().nbytes())] for t, _ in packed]
    kept = sum(acts[k] for k in _held([h for _, h in packed] + [vars(hooks)], set(acts)))
    packed.clear()
    got = attempt(path, lambda: {"grads": backward_grads(net, out, w)})
    return {"grads": got.get("grads", []), "backward": got.get("failure", {}).get("message", ""),
            "on_disk": int(on_disk), "packed": kinds, "kept": int(kept), "lost": lost[:5],
            "left": len(_files(folder))}


def offload_rank(rank: int, world: int, log: records.OpLog, path: str, params: dict[str, Any],
                 paths: list[str] | None = None) -> list[dict[str, Any]]:
    """(Runs in the child.) Per module of ``paths`` (default: ``path``), per dtype: its facts, or its fault."""
    return [_module(p, params) for p in paths or [path]]


def _module(path: str, params: dict[str, Any]) -> dict[str, Any]:
    loaded = attempt(path, lambda: {"m": load_module(path)})
    if "m" not in loaded:
        return {"load": loaded}
    runs = {}
    for dtype in params["dtypes"]:
        with tempfile.TemporaryDirectory(prefix="labkit-offload-") as d:
            runs[dtype] = attempt(path, lambda dtype=dtype, d=d: _run(path, loaded["m"], params, dtype, Path(d) / "o"))
    return runs


def collect_many(paths: list[Path], params: dict[str, Any]) -> list[dict[str, Any]]:
    """One child process for every module in ``paths`` (a test's mutants); one record each."""
    got = records.ask(offload_rank, paths[0], timeout=TIMEOUT_S, params=params, paths=[str(p) for p in paths])
    if "ranks" not in got:
        return [got for _ in paths]
    return [{**got, "ranks": [r]} for r in got["ranks"][0]]


def collect(path: Path, params: dict[str, Any]) -> dict[str, Any]:
    """The raw record of the learner's module at ``path``, run in a child process."""
    return collect_many([path], params)[0]


def bench_rank(rank: int, world: int, log: records.OpLog, path: str, params: dict[str, Any],
               steps: int = 20) -> list[dict[str, Any]]:
    """(Runs in the child.) Seconds per step and bytes written per step: plain autograd, then the learner's hooks."""
    import time

    m = load_module(path)
    net, x, w = model(params, params["dtypes"][0])
    rows = []
    with tempfile.TemporaryDirectory(prefix="labkit-offload-") as d:
        for label in ("no offload", "yours (files)"):
            t0, written = time.perf_counter(), 0
            for _ in range(steps):
                if label == "no offload":
                    out = net(x)
                else:
                    with m.FileOffload(Path(d), net):
                        out = net(x)
                written = sum(f.stat().st_size for f in _files(Path(d)))
                backward_grads(net, out, w)
            rows.append({"run": label, "seconds per step": (time.perf_counter() - t0) / steps,
                         "bytes written per step": int(written)})
    return rows
