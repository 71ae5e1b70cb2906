"""Notebook 04's build-it exercise: activation offload to files through saved-tensor hooks, graded in one process.

vDNN (Rhu et al., MICRO 2016) offloads what autograd saves for backward and brings it back just in time; the lab's
own version is :class:`labkit.offload.vdnn.Offloader`. The learner writes the core of it: a
``torch.autograd.graph.saved_tensors_hooks`` whose ``pack`` writes each saved tensor that is not a parameter to a
raw file and whose ``unpack`` reads it back and removes it. No process group is needed: one process, real files.

Checked on a tiny MLP (32 -> 64 -> 32, 4,192 parameters, a batch of 64) in float32 and bfloat16:

* gradients bit-identical to the run without hooks (a file round trip changes no bit);
* bytes on disk after forward equal the prediction of labkit's saved-tensor accounting
  (:class:`labkit.measure.SavedTensorRecorder`: each saved storage once, parameters left out, the batch in);
* nothing kept in memory besides the files: after forward, no handle (nor the hooks object) still references an
  offloaded tensor's storage (if one does, the bytes are written AND kept, and the memory peak is not reduced);
* every tensor comes back with its dtype (numpy has no bf16: it goes through as int16, see the field notes);
* the folder is empty after backward (no leaked files).
"""

from __future__ import annotations

import gc
import tempfile
import time
import types
from pathlib import Path

import torch
import torch.nn as nn

from labkit.measure import SavedTensorRecorder
from labkit.practice.build.harness import BuildExercise, load_module, register_build
from labkit.practice.coding import Case

KEY = "04.build.act_offload"
DTYPES = (torch.float32, torch.bfloat16)
BATCH, WIDTH, HIDDEN = 64, 32, 64


def _model(dtype: torch.dtype) -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(WIDTH, HIDDEN), nn.GELU(), nn.Linear(HIDDEN, WIDTH)).to(dtype)
    return net, torch.randn(BATCH, WIDTH).to(dtype), torch.randn(BATCH, WIDTH)


def _key(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr()


def _backward(net: nn.Module, out: torch.Tensor, weights: torch.Tensor) -> list[torch.Tensor]:
    (out.float() * weights).sum().backward()
    grads = [p.grad.clone() for p in net.parameters()]
    net.zero_grad(set_to_none=True)
    return grads


def predicted_bytes(dtype: torch.dtype = torch.float32) -> int:
    """Bytes an offload of every saved activation writes: labkit's saved-tensor accounting of the same forward."""
    net, x, _ = _model(dtype)
    with SavedTensorRecorder(net) as rec:
        net(x)
    return sum(s.nbytes for s in rec.saved)


def _files(folder: Path) -> list[Path]:
    return [f for f in folder.rglob("*") if f.is_file()] if folder.exists() else []


def _held(roots: list[object], keys: set[int], depth: int = 6) -> set[int]:
    """Storages among ``keys`` that a tensor reachable from ``roots`` still uses (objects and containers; code,
    modules and classes are not followed)."""
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


class _Spy:
    """Wraps the learner's hooks: what pack got and returned, what unpack returned."""

    def __init__(self, hooks) -> None:
        self.packed: list[tuple[torch.Tensor, object]] = []
        self.dtypes: dict[int, torch.dtype] = {}
        self.lost: list[str] = []
        real_pack, real_unpack = hooks.pack_hook, hooks.unpack_hook

        def pack(t):
            handle = real_pack(t)
            self.packed.append((t, handle))
            self.dtypes[id(handle)] = t.dtype
            return handle

        def unpack(handle):
            t = real_unpack(handle)
            want = self.dtypes.get(id(handle))
            if want is not None and t.dtype != want:
                self.lost.append(f"{str(want).replace('torch.', '')} came back as {str(t.dtype).replace('torch.', '')}")
            return t

        hooks.pack_hook, hooks.unpack_hook = pack, unpack


def _one(m, dtype: torch.dtype, folder: Path) -> dict:
    """One forward+backward under the learner's hooks, measured beside the plain run."""
    net, x, w = _model(dtype)
    plain = _backward(net, net(x), w)
    params = {_key(p) for p in net.parameters()}
    hooks = m.FileOffload(folder, net)
    spy = _Spy(hooks)
    with hooks:
        out = net(x)
    on_disk = sum(f.stat().st_size for f in _files(folder))
    acts = {_key(t): t.untyped_storage().nbytes() for t, _ in spy.packed if _key(t) not in params}
    param_bytes = sum({_key(t): t.untyped_storage().nbytes() for t, _ in spy.packed if _key(t) in params}.values())
    kept = _held([h for _, h in spy.packed] + [vars(hooks)], set(acts))
    spy.packed.clear()
    try:
        grads, error = _backward(net, out, w), ""
    except Exception as err:  # noqa: BLE001 - the learner's unpack may raise anything: say what
        grads, error = [], f"backward raised {type(err).__name__}: {err}"
    left = _files(folder)
    return {"same": bool(grads) and all(torch.equal(a, b) for a, b in zip(grads, plain, strict=True)),
            "error": error, "on_disk": on_disk, "param_bytes": param_bytes, "kept": sum(acts[k] for k in kept),
            "acts": sum(acts.values()), "lost": spy.lost, "left": len(left)}


def _cases(r: dict, dtype: torch.dtype, predicted: int) -> list[Case]:
    name = str(dtype).replace("torch.", "")
    if r["lost"]:
        grads = f"the dtype was lost: {r['lost'][0]} (numpy has no bf16: view it as int16 to keep its 2 bytes)"
    else:
        grads = r["error"] or "gradients differ from the run without offload"
    cases = [Case(f"[{name}] gradients bit-identical to no offload", r["same"] and not r["lost"], grads, GRADS)]
    extra = r["on_disk"] - predicted
    if extra and extra == r["param_bytes"]:
        why = (f"{extra:,} B too many, exactly the parameters' bytes: parameters offloaded too (they are not "
               "activations)")
    elif r["on_disk"] == 2 * predicted and dtype == torch.bfloat16:
        why = "twice the bytes: the bf16 tensors were stored as float32 (the dtype lost on the way through numpy)"
    else:
        why = f"{r['on_disk']:,} B on disk after forward"
    cases.append(Case(f"[{name}] bytes written equal the prediction ({predicted:,} B: saved activations, each once)",
                      r["on_disk"] == predicted, why, BYTES))
    return cases


def run(path: Path) -> list[Case]:
    """Grade the module at ``path``: float32 and bfloat16, each in a fresh temporary folder."""
    m = load_module(path)
    cases, results = [], []
    for dtype in DTYPES:
        with tempfile.TemporaryDirectory(prefix="labkit-offload-") as d:
            r = _one(m, dtype, Path(d) / "offload")
        results.append(r)
        cases += _cases(r, dtype, predicted_bytes(dtype))
    kept = max(r["kept"] for r in results)
    cases.append(Case("nothing kept in memory besides the files (the memory peak goes down)", kept == 0,
                      f"after forward {kept:,} B of offloaded activations are still referenced by pack's handles or "
                      "the hooks object: kept in memory as well as written, so the peak is not reduced", KEPT))
    left = max(r["left"] for r in results)
    broke = any(r["error"] for r in results)
    cases.append(Case("every file removed once backward has read it", left == 0 and not broke,
                      "backward did not finish (see above): not every file was read back" if broke else
                      f"{left} file(s) left in the folder after backward: leaking files (a long run fills the disk)",
                      FILES))
    return cases


def benchmark(path: str | Path, dtype: torch.dtype = torch.float32, steps: int = 20) -> list[dict]:
    """Your offload beside plain autograd: seconds per step (shown, never asserted) and bytes written per step."""
    m = load_module(path)
    net, x, w = _model(dtype)
    rows = []
    with tempfile.TemporaryDirectory(prefix="labkit-offload-") as d:
        for label in ("no offload", "yours (files)"):
            t0 = time.perf_counter()
            for _ in range(steps):
                if label == "no offload":
                    out = net(x)
                else:
                    with m.FileOffload(Path(d), net):
                        out = net(x)
                written = sum(f.stat().st_size for f in _files(Path(d)))
                _backward(net, out, w)
            rows.append({"run": label, "seconds per step": (time.perf_counter() - t0) / steps,
                         "bytes written per step": written, "predicted bytes": predicted_bytes(dtype)})
    rows[0]["predicted bytes"] = 0
    return rows


GRADS = ("Does unpack return exactly the tensor pack received: same dtype, same shape, same bits?",
         "Write the raw bytes (bf16 viewed as int16) and rebuild with torch.from_numpy(...).view(dtype).view(shape).")
BYTES = ("Which saved tensors are parameters? They stay in memory anyway (the optimizer needs them).",
         "Remember the parameters' storages (p.untyped_storage().data_ptr()) and return those tensors as they are.")
KEPT = ("After pack returns, what still points at the tensor? Autograd keeps only your handle.",
        "Return a handle that holds the file's path, the dtype and the shape: no tensor.")
FILES = ("Who removes a file once backward has read it back?", "os.remove(path) in unpack, after reading.")


register_build(BuildExercise(
    KEY,
    "act_offload.py",
    "In build/act_offload.py write FileOffload(folder, model), a torch.autograd.graph.saved_tensors_hooks: pack(t) "
    "writes each saved tensor that is not a parameter to one raw file in folder and returns a small handle; "
    "unpack(handle) reads it back bit for bit and removes the file. Checked in float32 and bfloat16: gradients "
    "bit-identical, bytes on disk equal to labkit's saved-tensor prediction, nothing kept in memory, no file left.",
    run,
    ("What does autograd keep between forward and backward, and which of it is not an activation?",
     "pack: skip parameters, write t's bytes to a new file, return (path, dtype, shape); unpack: read, rebuild, "
     "remove."),
    "In __init__ remember {p.untyped_storage().data_ptr() for p in model.parameters()}. pack returns a parameter "
    "as it is; otherwise it writes t.detach().contiguous() (viewed as int16 when bf16) with .numpy().tofile(path) "
    "and returns (path, t.dtype, tuple(t.shape)). unpack reads np.fromfile(path, dtype), removes the file and "
    "returns torch.from_numpy(arr).view(dtype).view(shape).",
))
