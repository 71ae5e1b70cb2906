"""Notebook 04's build-it exercise: activation offload to files through saved-tensor hooks.

vDNN (Rhu et al., MICRO 2016) offloads what autograd saves for backward and brings it back just in time; the lab's
own version is :class:`labkit.offload.vdnn.Offloader`. The learner writes the core of it: a
``torch.autograd.graph.saved_tensors_hooks`` whose ``pack`` writes each saved tensor that is not a parameter to a
raw file and whose ``unpack`` reads it back and removes it.

The check is split by trust (:mod:`labkit.practice.build.harness`). :func:`draw` picks the MLP's shapes per run
(odd widths, so a module written for one shape shows). :func:`collect` runs the learner's hooks in a child process
(:func:`labkit.practice.build.records.ask`: one rank, no group needed, real files) in float32 and bfloat16 and
brings back raw facts: the gradients, the bytes on disk after forward, what pack received (parameter or not, its
bytes), the bytes of offloaded tensors still referenced after forward, each dtype that came back changed, the files
left after backward. :func:`judge`, here, computes the plain run's gradients itself (one thread, as the rank runs:
bit for bit) and the prediction, labkit's saved-tensor accounting (:class:`labkit.measure.SavedTensorRecorder`:
each saved storage once, parameters left out), and names the bug: parameters offloaded too (the excess is exactly
their bytes), a lost dtype (numpy has no bf16: view it as int16, see the field notes), tensors kept in memory as
well as written (the peak is not reduced), leaking files.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import torch

from labkit.measure import SavedTensorRecorder
from labkit.practice.build import diagnosis as dg
from labkit.practice.build import records
from labkit.practice.build.harness import BuildExercise, register_build
from labkit.practice.build.offload_collect import (  # noqa: F401 - collect_many: the tests' grouped run
    TIMEOUT_S,
    backward_grads,
    bench_rank,
    collect,
    collect_many,
    model,
)
from labkit.practice.coding import Case

KEY = "04.build.act_offload"
DTYPES = ("float32", "bfloat16")


def draw(seed: int) -> dict[str, Any]:
    """The tiny MLP's shapes, odd where they can be (batch x width -> hidden -> width), and the dtypes."""
    rng = random.Random(seed)
    extra = ["float16"] if rng.random() < 0.5 else []  # numpy has float16: a second 2-byte path, half the runs
    return {"batch": rng.randrange(17, 65, 2), "width": rng.randrange(9, 41, 2), "hidden": rng.randrange(19, 73, 2),
            "dtypes": [*DTYPES, *extra]}


def predicted_bytes(params: dict[str, Any], dtype: str) -> int:
    """Bytes an offload of every saved activation writes: labkit's saved-tensor accounting of the same forward."""
    net, x, _ = model(params, dtype)
    with SavedTensorRecorder(net) as rec:
        net(x)
    return sum(s.nbytes for s in rec.saved)


def _plain_grads(params: dict[str, Any], dtype: str) -> list[torch.Tensor]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the child runs on one thread: the same kernels, the same bits
    try:
        net, x, w = model(params, dtype)
        return backward_grads(net, net(x), w)
    finally:
        torch.set_num_threads(threads)


def _cases(r: dict[str, Any], params: dict[str, Any], dtype: str) -> list[Case]:
    predicted = predicted_bytes(params, dtype)
    if (failure := r.get("failure")) is not None:
        msg = f"raised {failure.get('message')}" + (f" (at {failure['learner_frames']})"
                                                    if failure.get("learner_frames") else "")  # fmt: skip
        return [Case(f"[{dtype}] the hooks run", False, msg, GRADS)]
    grads, lost = dg.field(r, "grads", list), dg.field(r, "lost", list)
    plain = _plain_grads(params, dtype)
    same = len(grads) == len(plain) and all(
        isinstance(g, torch.Tensor) and g.dtype == p.dtype and g.shape == p.shape and torch.equal(g, p)
        for g, p in zip(grads, plain, strict=True))
    if lost:
        why = f"the dtype was lost: {lost[0]} (numpy has no bf16: view it as int16 to keep its 2 bytes)"
    else:
        why = str(dg.field(r, "backward", str)) or "gradients differ from the run without offload"
    cases = [Case(f"[{dtype}] gradients bit-identical to no offload", same and not lost, why, GRADS)]
    on_disk = dg.field(r, "on_disk", int)
    param_bytes = sum(int(n) for is_param, n in dg.field(r, "packed", list) if is_param is True)
    extra = on_disk - predicted
    if extra and extra == param_bytes:
        why = f"{extra:,} B too many, exactly the parameters' bytes: parameters offloaded too (not activations)"
    elif on_disk == 2 * predicted and dtype == "bfloat16":
        why = "twice the bytes: the bf16 tensors were stored as float32 (the dtype lost on the way through numpy)"
    else:
        why = f"{on_disk:,} B on disk after forward"
    cases.append(Case(f"[{dtype}] bytes written equal the prediction ({predicted:,} B: saved activations, each once)",
                      on_disk == predicted, why, BYTES))
    return cases


def judge(record: dict[str, Any], params: dict[str, Any]) -> list[Case]:
    """(TRUSTED side.) Per dtype: gradients and bytes; over both: nothing kept in memory, no file left."""
    if stop := dg.failure_case(record, f"the hooks run within {TIMEOUT_S:g} s", {"raised": GRADS}):
        return [stop]
    runs = dg.field(dg.ranks_of(record, 1), 0, dict)
    if "load" in runs:
        return [Case("the module imports", False, str(runs["load"].get("failure", {}).get("message")), GRADS)]
    cases, done = [], []
    for dtype in params["dtypes"]:
        r = dg.field(runs, dtype, dict)
        cases += _cases(r, params, dtype)
        if "failure" not in r:
            done.append(r)
    kept = max((dg.field(r, "kept", int) for r in done), default=0)
    cases.append(Case("nothing kept in memory besides the files (the memory peak goes down)", kept == 0,
                      f"after forward {kept:,} B of offloaded activations are still referenced by pack's handles or "
                      "the hooks object: kept in memory as well as written, so the peak is not reduced", KEPT))
    left = max((dg.field(r, "left", int) for r in done), default=0)
    broke = len(done) < len(params["dtypes"]) or any(dg.field(r, "backward", str) for r in done)
    cases.append(Case("every file removed once backward has read it", left == 0 and not broke,
                      "backward did not finish (see above): not every file was read back" if broke else
                      f"{left} file(s) left in the folder after backward: leaking files (a long run fills the disk)",
                      FILES))
    return cases


def benchmark(path: str | Path, dtype: str = "float32", steps: int = 20, seed: int = 0) -> list[dict]:
    """Your offload beside plain autograd, in a child process: seconds per step (shown, never asserted: a step of
    this toy is dominated by Python and file calls, not bytes) and bytes written per step beside the prediction."""
    params = {**draw(seed), "seed": seed, "dtypes": [dtype]}
    got = records.ask(bench_rank, path, timeout=60.0, params=params, steps=steps)
    if "ranks" not in got:
        return [{"run": "yours (files)", "error": str(got.get("failure", {}).get("message", ""))}]
    rows = got["ranks"][0]
    for row, predicted in zip(rows, (0, predicted_bytes(params, dtype)), strict=True):
        row["predicted bytes"] = predicted
    return rows


GRADS = ("Does unpack return exactly the tensor pack received: same dtype, same shape, same bits?",
         "Write the raw bytes (bf16 viewed as int16) and rebuild with torch.from_numpy(...).view(dtype).view(shape).")
BYTES = ("Which saved tensors are parameters? They stay in memory anyway (the optimizer needs them).",
         "Remember the parameters' storages (p.untyped_storage().data_ptr()) and return those tensors as they are.")
KEPT = ("After pack returns, what still points at the tensor? Autograd keeps only your handle.",
        "Return a handle that holds the file's path, the dtype and the shape: no tensor.")
FILES = ("Who removes a file once backward has read it back?", "os.remove(path) in unpack, after reading.")


register_build(BuildExercise(
    key=KEY, stub="act_offload.py",
    task="In build/act_offload.py write FileOffload(folder, model), a torch.autograd.graph.saved_tensors_hooks: "
         "pack(t) writes each saved tensor that is not a parameter to one raw file in folder and returns a small "
         "handle; unpack(handle) reads it back bit for bit and removes the file. Checked in float32, bfloat16 (and "
         "float16 in some runs) on shapes drawn per run: gradients bit-identical, bytes on disk equal to labkit's "
         "saved-tensor prediction, nothing kept in memory, no file left.",
    hint=("What does autograd keep between forward and backward, and which of it is not an activation?",
          "pack: skip parameters, write t's bytes to a new file, return (path, dtype, shape); unpack: read, rebuild, "
          "remove."),
    worked="In __init__ remember {p.untyped_storage().data_ptr() for p in model.parameters()}. pack returns a "
           "parameter as it is; otherwise it writes t.detach().contiguous() (viewed as int16 when bf16) with "
           ".numpy().tofile(path) and returns (path, t.dtype, tuple(t.shape)). unpack reads np.fromfile(path, "
           "dtype), removes the file and returns torch.from_numpy(arr).view(dtype).view(shape).",
    draw=draw, collect=collect, judge=judge,
))
