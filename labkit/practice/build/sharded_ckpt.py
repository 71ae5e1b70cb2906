"""Notebook 06's build-it exercise: a sharded, atomic checkpoint across 2 gloo ranks that survives a SIGKILL.

The single-file version is :mod:`labkit.practice.checkpoint` (06.code.atomic_save); the lab's own sharded writer
is :mod:`labkit.resilience.checkpoint`. Here the learner writes ``save_sharded(state, folder, step)`` (every
rank) and ``load_sharded(folder, rank)`` (one process). The order that makes it safe is the one of
``torch.distributed.checkpoint``: every shard written and flushed to disk, a collective so that rank 0 knows
they all are, then the manifest written, flushed and renamed over the old one (Mohan et al., "CheckFreq",
FAST 2021, make the same point: a checkpoint is only as good as its commit).

How it is graded, each on real processes:

* a round trip on 2 ranks (:mod:`labkit.dist`): step 1 then step 2 saved, each rank's state back bit for bit;
  the calls the save of step 2 makes (``torch.save``, ``os.fsync``, ``os.replace``/``os.rename``, collectives)
  are spied, as :mod:`labkit.practice.checkpoint` does, which names three bugs a kill cannot always show:
  a rename without fsync, a manifest committed before the shards, no barrier between them;
* real SIGKILLs (``labkit.dist.run_outcomes``): a rank dies half-way through writing its shard of step 2
  (rank 1 after a 1 s delay, so that rank 0 runs ahead; then rank 0); afterwards both ranks must load the same
  complete checkpoint, step 1 or step 2, bit for bit;
* an untrusted folder: a shard replaced by a pickle that would create a file when unpickled; loading must not
  run it (``torch.load(..., weights_only=True)``), and the loader's ``torch.load`` calls are spied.
"""

from __future__ import annotations

import builtins
import io
import os
import shutil
import signal
import tempfile
import time
import zipfile
from pathlib import Path

import torch
import torch.distributed as dist

from labkit import dist as ldist
from labkit.practice.build.harness import BuildExercise, launch, learner_frames, load_module, register_build
from labkit.practice.coding import Case

KEY = "06.build.sharded_ckpt"
COLLECTIVES = ("barrier", "all_gather_object", "gather_object", "broadcast_object_list", "all_reduce", "all_gather",
               "broadcast")
KILLS = ((1, 1.0), (0, 0.0))  # (rank that dies half-way through its shard of step 2, seconds it waits first)
TIMEOUT_S = 30.0


def state_of(rank: int, step: int) -> dict[str, torch.Tensor]:
    """Rank ``rank``'s training state at ``step``: fp32 weights, bf16 moments, the step (a few thousand values)."""
    g = torch.Generator().manual_seed(100 * step + rank)
    return {"w": torch.randn(2048, generator=g), "m": torch.randn(1024, generator=g).to(torch.bfloat16),
            "step": torch.tensor(step)}


def _same(a: dict, b: dict) -> bool:
    return isinstance(a, dict) and a.keys() == b.keys() and all(
        isinstance(a[k], torch.Tensor) and a[k].dtype == b[k].dtype and torch.equal(a[k], b[k]) for k in b)


def _paths(kind: str, args: tuple) -> tuple[str, ...]:
    if kind == "save" and len(args) > 1:
        return (str(getattr(args[1], "name", args[1])),)
    return tuple(str(a) for a in args[:2]) if kind == "rename" else ()


class _Spy:
    """Records, in order, the save's calls to torch.save, os.fsync, os.replace/os.rename and the collectives."""

    def __init__(self) -> None:
        self.events: list[str] = []
        self.paths: list[tuple[str, ...]] = []  # what torch.save wrote, what a rename moved
        self._real: list[tuple[object, str, object]] = []

    def wrap(self, owner: object, name: str, kind: str, before=None) -> None:
        real = getattr(owner, name)

        def spy(*args, **kw):
            self.events.append(kind)
            self.paths.append(_paths(kind, args))
            if before is not None:
                return before(real, *args, **kw)
            return real(*args, **kw)

        self._real.append((owner, name, real))
        setattr(owner, name, spy)

    def __enter__(self) -> _Spy:
        self.wrap(torch, "save", "save")
        for name in ("fsync", "fdatasync"):
            self.wrap(os, name, "fsync")
        for name in ("replace", "rename"):
            self.wrap(os, name, "rename")
        for name in COLLECTIVES:
            self.wrap(dist, name, "collective")
        return self

    def __exit__(self, *exc) -> None:
        for owner, name, real in reversed(self._real):
            setattr(owner, name, real)


def round_trip_rank(rank: int, world: int, path: str, folder: str) -> list:
    """(Runs in a rank.) Save steps 1 and 2; the calls made by the save of step 2, in order, with their paths."""
    m = load_module(path)
    m.save_sharded(state_of(rank, 1), folder, 1)
    with _Spy() as spy:
        m.save_sharded(state_of(rank, 2), folder, 2)
    return list(zip(spy.events, spy.paths, strict=True))


def _torn(real, obj, f, *args, delay: float = 0.0, **kw) -> None:
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


def kill_rank(rank: int, world: int, path: str, folder: str, victim: int, delay: float) -> str:
    """(Runs in a rank.) Save step 1; then save step 2, rank ``victim`` killed half-way through its shard."""
    m = load_module(path)
    m.save_sharded(state_of(rank, 1), folder, 1)
    dist.barrier()
    if rank == victim:
        spy = _Spy()
        spy.wrap(torch, "save", "save", before=lambda real, *a, **k: _torn(real, *a, delay=delay, **k))
    m.save_sharded(state_of(rank, 2), folder, 2)
    return "saved"


def _diagnose(calls: list[list]) -> list[Case]:
    """The order of rank 0's calls (it commits the manifest), and an fsync before every rename on every rank.

    The manifest's commit is rank 0's last rename of a file that ``torch.save`` did not write (a shard's own
    rename moves the file torch.save wrote)."""
    events = [[kind for kind, _ in c] for c in calls]
    ev, written = events[0], {p[0] for kind, p in calls[0] if kind == "save" and p}
    last = max((i for i, (kind, p) in enumerate(calls[0]) if kind == "rename" and not (set(p) & written)),
               default=None)
    saves = [i for i, e in enumerate(ev) if e == "save"]
    cases = [Case("rank 0 commits the manifest with an atomic rename (os.replace)", last is not None,
                  f"calls seen on rank 0: {', '.join(ev) or 'none'}", COMMIT)]
    if last is not None:
        first = saves and saves[-1] > last
        cases.append(Case("the manifest is committed after the shards", not first,
                          "manifest written before the shards: rank 0 renamed the manifest into place, then saved "
                          "its shard (a kill in between leaves a manifest naming a shard that is not there)", ORDER))
        between = ev[saves[-1] + 1:last] if saves and not first else ["collective"]
        cases.append(Case("a collective between the shard writes and the manifest", "collective" in between,
                          "no barrier between the shard writes and the manifest: rank 0 cannot know the other "
                          "shards are on disk when it commits", ORDER))
    bare = [r for r, ev in enumerate(events) if any(
        e == "rename" and "fsync" not in ev[max((j for j in range(i) if ev[j] == "rename"), default=-1) + 1:i]
        for i, e in enumerate(ev))]  # fmt: skip
    cases.append(Case("every file is flushed to disk (os.fsync) before its rename", not bare,
                      f"rename without fsync on rank {bare[0] if bare else ''}: a SIGKILL cannot show it (the kernel "
                      "keeps a dead process's pages); a power cut before they reach the disk leaves a renamed, empty "
                      "file", FSYNC))
    return cases


def _loads(m, folder: Path, steps: tuple[int, ...], name: str) -> Case:
    """Both ranks load the same complete checkpoint, one of ``steps``, bit for bit."""
    try:
        got = [m.load_sharded(folder, r) for r in range(2)]
    except NotImplementedError:
        raise
    except Exception as err:  # noqa: BLE001 - a torn shard fails to load in many ways
        return Case(name, False, f"the checkpoint does not load: {type(err).__name__}: {err}", TORN)
    if any(g is None for g in got):
        return Case(name, False, "load_sharded found no checkpoint", TORN)
    ok = got[0][0] == got[1][0] in steps and all(_same(g[1], state_of(r, g[0])) for r, g in enumerate(got))
    return Case(name, ok, f"loaded steps {[g[0] for g in got]}: not one complete checkpoint of steps {steps}, "
                "bit for bit", TORN)


def _untrusted(m, folder: Path) -> list[Case]:
    """A shard replaced by a pickle that creates a file when unpickled: the loader must not run it."""
    marker = folder.parent / "pwned"

    class Evil:
        def __reduce__(self):
            return builtins.open, (str(marker), "w")

    for f in folder.rglob("*"):
        if f.is_file() and zipfile.is_zipfile(f):
            torch.save({"w": Evil()}, f)
    seen: list[object] = []
    real = torch.load
    torch.load = lambda *a, **k: (seen.append(k.get("weights_only", True)), real(*a, **k))[1]
    try:
        for r in range(2):
            try:
                m.load_sharded(folder, r)
            except NotImplementedError:
                raise
            except Exception:  # noqa: BLE001, S110 - refusing the file is right; running it is what is checked
                pass
    finally:
        torch.load = real
    ran, unsafe = marker.exists(), [w for w in seen if w is not True]
    return [Case("an untrusted shard is refused, never unpickled (torch.load with weights_only=True)",
                 not ran and not unsafe, "loading with weights_only=False ran code from the checkpoint folder "
                 f"({'a file was created by the pickle' if ran else 'torch.load called with weights_only=False'})",
                 TRUST)]


def run(path: Path, kills: tuple[tuple[int, float], ...] = KILLS) -> list[Case]:
    m = load_module(path)
    with tempfile.TemporaryDirectory(prefix="labkit-sharded-") as d:
        folder = Path(d) / "ckpt"
        events, failed = launch(round_trip_rank, 2, path, what="saving", timeout=TIMEOUT_S, folder=str(folder))
        if failed:
            return [failed]
        cases = [_loads(m, folder, (2,), "round trip: step 2 loads on both ranks, bit for bit"), *_diagnose(events)]
        cases += _untrusted(m, folder)
        for victim, delay in kills:
            shutil.rmtree(folder, ignore_errors=True)
            outs = ldist.run_outcomes(kill_rank, 2, timeout=TIMEOUT_S, path=str(path), folder=str(folder),
                                      victim=victim, delay=delay)
            odd = [o for o in outs if o.rank != victim and o.status == "raised" and "NotImplementedError" in o.error]
            if odd:
                raise NotImplementedError(odd[0].error)
            name = f"SIGKILL of rank {victim} half-way through its shard of step 2: one whole checkpoint loads"
            if outs[victim].exit_code != -signal.SIGKILL:
                where = learner_frames(outs[victim].remote_traceback, path)
                cases.append(Case(name, False, f"rank {victim} was not killed while saving its shard: "
                                  f"{outs[victim].error or 'it never called torch.save'} {where}".strip(), TORN))
                continue
            cases.append(_loads(m, folder, (1, 2), name))
    return cases


COMMIT = ("What makes the new checkpoint visible, in one step that cannot be half done?",
          "Rank 0 writes manifest.json.tmp, fsyncs it and os.replace()s it over manifest.json.")
ORDER = ("When rank 0 commits the manifest, how does it know every other rank's shard is on disk?",
         "Every rank: write, fsync, rename its shard; then a collective (dist.barrier or all_gather_object of the "
         "checksums); only then rank 0 writes the manifest.")
FSYNC = ("Which call puts a file's bytes on the disk rather than in the kernel's page cache?",
         "f.flush(); os.fsync(f.fileno()) before each os.replace.")
TORN = ("After a kill half-way through a shard, what does the manifest point at?",
        "The manifest must only ever name shards that are complete: commit it last, after a collective.")
TRUST = ("Who wrote the files in a checkpoint folder? Unpickling runs whatever code the pickle names.",
         "torch.load(path, weights_only=True), and check each shard's SHA-256 against the manifest.")


register_build(BuildExercise(
    KEY,
    "sharded_ckpt.py",
    "In build/sharded_ckpt.py write save_sharded(state, folder, step) (every rank writes its shard with "
    "torch.save; rank 0 commits a manifest last) and load_sharded(folder, rank) -> (step, state) or None "
    "(torch.load with weights_only=True). Checked on 2 gloo ranks: a round trip, real SIGKILLs half-way through a "
    "shard, fsync before every rename, the commit order, and an untrusted shard refused.",
    run,
    ("A kill can strike any rank at any byte: which single file decides what a reader sees?",
     "Shards first (write, fsync, rename), then a collective, then rank 0's manifest (write, fsync, rename)."),
    "Each rank torch.saves its state to step-N/shard-r.tmp, flushes and fsyncs it, os.replaces it to shard-r.pt; "
    "dist.all_gather_object collects every shard's name and SHA-256 (it is also the barrier); rank 0 writes "
    "manifest.json.tmp with the step and the checksums, fsyncs it and os.replaces it over manifest.json; a last "
    "barrier. load_sharded reads manifest.json, checks the shard's SHA-256 and torch.loads it with "
    "weights_only=True.",
))
