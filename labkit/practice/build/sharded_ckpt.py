"""Notebook 06's build-it exercise: a sharded, atomic checkpoint across gloo ranks that survives a SIGKILL.

The single-file version is :mod:`labkit.practice.checkpoint` (06.code.atomic_save); the lab's own sharded writer
is :mod:`labkit.resilience.checkpoint`. Here the learner writes ``save_sharded(state, folder, step)`` (every
rank) and ``load_sharded(folder, rank)`` (one process). The order that makes it safe is the one of
``torch.distributed.checkpoint``: every shard written and flushed to disk, a collective so that rank 0 knows
they all are, then the manifest written, flushed and renamed over the old one (Mohan et al., "CheckFreq",
FAST 2021, make the same point: a checkpoint is only as good as its commit).

Split by trust (:mod:`labkit.practice.build.harness`): :func:`draw` picks the state's size per run;
:func:`collect` (:mod:`labkit.practice.build.ckpt_collect`) saves and loads with the learner's module only in
child processes (round trips on 2 and 4 ranks with the save's calls spied, real SIGKILLs half-way through a
shard, every load and an untrusted folder in one more child) and returns raw records; :func:`judge` computes
each rank's state itself and names the bug from the evidence: the ranks' writes landing on one path (they
overwrite each other's shard), a rename with no fsync since the last one, rank 0's manifest renamed before its
shard is saved (manifest written first) or with no collective in between (no barrier), a loader that unpickles
(``weights_only=False``), and a kill after which no complete checkpoint loads.
"""

from __future__ import annotations

import random
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch

from labkit.practice.build import diagnosis as dg
from labkit.practice.build import records
from labkit.practice.build.ckpt_collect import TIMEOUT_S, kill_rank, load_rank, round_trip_rank, state_of
from labkit.practice.build.harness import BuildExercise, register_build
from labkit.practice.coding import Case

KEY = "06.build.sharded_ckpt"
KILLS = ((1, 1.0), (0, 0.0))  # (rank that dies half-way through its shard of step 2, seconds it waits first)


def draw(seed: int) -> dict[str, Any]:
    """The state's size (odd, so a shard of fixed size shows), the world sizes and the kills."""
    rng = random.Random(seed)
    return {"numel": rng.randrange(1001, 4097, 2), "worlds": [2, 4], "kills": [list(k) for k in KILLS]}


def collect_many(paths: list[Path], params: dict[str, Any], kills: bool = True) -> list[dict[str, Any]]:
    """One record per module: the round trips share one launch per world size, the loads one child; the kills
    (one launch each) run for each module when ``kills``."""
    base = Path(tempfile.mkdtemp(prefix="labkit-sharded-"))
    out: list[dict[str, Any]] = [{"round_trips": [], "kills": []} for _ in paths]
    folders: list[dict[str, list]] = [{} for _ in paths]
    try:
        for w in params["worlds"]:
            jobs = [[str(p), str(base / f"m{i}" / f"rt{w}")] for i, p in enumerate(paths)]
            got = records.ranks(round_trip_rank, int(w), paths[0], timeout=TIMEOUT_S, params=params, jobs=jobs)
            ok = "ranks" in got and all(isinstance(r, list) and len(r) == len(paths) for r in got["ranks"])
            for i, rec in enumerate(out):
                rec["round_trips"].append({**got, "ranks": [r[i] for r in got["ranks"]]} if ok else got)
                folders[i][f"rt{w}"] = [jobs[i][1], int(w)]
        for i, p in enumerate(paths if kills else []):
            for victim, delay in params["kills"]:
                folder = str(base / f"m{i}" / f"kill{victim}")
                got = records.ranks(kill_rank, 2, p, timeout=TIMEOUT_S, params=params, folder=folder,
                                    victim=int(victim), delay=float(delay))
                out[i]["kills"].append(got)
                folders[i][f"kill{victim}"] = [folder, 2]
        jobs = [{"module": str(p), "folders": folders[i], "evil": f"rt{params['worlds'][0]}"}
                for i, p in enumerate(paths)]  # fmt: skip
        got = records.ask(load_rank, paths[0], timeout=TIMEOUT_S, jobs=jobs)
        ok = "ranks" in got and isinstance(got["ranks"][0], list) and len(got["ranks"][0]) == len(paths)
        for i, rec in enumerate(out):
            rec["load"] = {**got, "ranks": [got["ranks"][0][i]]} if ok else got
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return out


def collect(path: Path, params: dict[str, Any]) -> dict[str, Any]:
    """The raw record of the learner's module at ``path``: round trips, kills and loads, all in child processes."""
    return collect_many([path], params)[0]


def _same(got: Any, want: dict[str, torch.Tensor]) -> bool:
    return isinstance(got, dict) and got.keys() == want.keys() and all(
        isinstance(got[k], torch.Tensor) and got[k].dtype == want[k].dtype and torch.equal(got[k], want[k])
        for k in want)  # fmt: skip


def _loads(loads: Any, w: int, steps: tuple[int, ...], name: str, params: dict[str, Any], hints: tuple) -> Case:
    """Every rank loads the same complete checkpoint, one of ``steps``, bit for bit."""
    got = dg.field({"l": loads}, "l", list)
    if len(got) != w:
        return Case(name, False, "the checkpoint folder was not there to load (the save did not run)", hints)
    for r, g in enumerate(got):
        failure = g.get("failure") if isinstance(g, dict) else None
        if failure:
            return Case(name, False, f"rank {r}'s shard does not load: {failure.get('message')}", hints)
        if not isinstance(g, dict) or "step" not in g:
            return Case(name, False, f"load_sharded found no checkpoint for rank {r}", hints)
    stepped = [g["step"] for g in got]
    ok = len(set(map(str, stepped))) == 1 and stepped[0] in steps and all(
        _same(g["state"], state_of(params, r, int(g["step"]))) for r, g in enumerate(got))  # fmt: skip
    other = [r for r, g in enumerate(got) if any(_same(g["state"], state_of(params, q, int(g["step"])))
                                                 for q in range(w) if q != r)]  # fmt: skip
    detail = (f"rank {other[0]} loaded another rank's state: ranks overwriting each other's shard file" if other
              else f"loaded steps {stepped}: not one complete checkpoint of steps {steps}, bit for bit")
    return Case(name, ok, detail, OVERWRITE if other else TORN)


def _commit(events: list[list]) -> int | None:
    """Where rank 0 commits: its last rename that is not its own shard's (the shard is what torch.save wrote of
    the rank's state; its rename moves that file)."""
    shard = {p[0] for kind, p in events if kind == "shard" and p}
    return max((i for i, (kind, p) in enumerate(events) if kind == "rename" and not (set(p) & shard)), default=None)


def _shared_targets(events: list[list]) -> str:
    """A path two ranks both saved to or renamed onto (rank 0's manifest commit left out)."""
    targets = []
    for ev in events:
        saved = {p[0] for kind, p in ev if kind in ("save", "shard") and p and "/" in p[0]}
        targets.append(saved | {p[1] for kind, p in ev if kind == "rename" and len(p) == 2})
    at = _commit(events[0])
    commit = events[0][at][1][1] if at is not None and len(events[0][at][1]) == 2 else None
    for r in range(1, len(targets)):
        both = (targets[0] - {commit}) & targets[r]
        if both:
            return f"rank 0 and rank {r} both wrote {Path(sorted(both)[0]).name}"
    return ""


def _order(events: list[list], w: int) -> list[Case]:
    """The order of rank 0's calls (it commits the manifest), and an fsync before every rename on every rank."""
    kinds = [[kind for kind, _ in ev] for ev in events]
    ev, last = kinds[0], _commit(events[0])
    saves = [i for i, e in enumerate(ev) if e == "shard"]
    cases = [Case(f"rank 0 commits the manifest with an atomic rename (os.replace) [{w} ranks]", last is not None,
                  f"calls seen on rank 0: {', '.join(ev) or 'none'}", COMMIT)]
    if last is not None:
        first = bool(saves) and saves[-1] > last
        cases.append(Case(f"the manifest is committed after the shards [{w} ranks]", not first,
                          "manifest written before the shards: rank 0 renamed the manifest into place, then saved "
                          "its shard (a kill in between leaves a manifest naming a shard that is not there)", ORDER))
        between = ev[saves[-1] + 1:last] if saves and not first else ["collective"]
        cases.append(Case(f"a collective between the shard writes and the manifest [{w} ranks]",
                          "collective" in between, "no barrier between the shard writes and the manifest: rank 0 "
                          "cannot know the other shards are on disk when it commits", ORDER))
    bare = [r for r, ev in enumerate(kinds) if any(
        e == "rename" and "fsync" not in ev[max((j for j in range(i) if ev[j] == "rename"), default=-1) + 1:i]
        for i, e in enumerate(ev))]  # fmt: skip
    cases.append(Case(f"every file is flushed to disk (os.fsync) before its rename [{w} ranks]", not bare,
                      f"rename without fsync on rank {bare[0] if bare else ''}: a SIGKILL cannot show it (the kernel "
                      "keeps a dead process's pages); a power cut before they reach the disk leaves a renamed, empty "
                      "file", FSYNC))
    return cases


def _kill(run: dict[str, Any], victim: int, loads: Any, params: dict[str, Any]) -> Case:
    name = f"SIGKILL of rank {victim} half-way through its shard of step 2: one whole checkpoint loads"
    failure = run.get("failure") if isinstance(run, dict) else None
    killed = isinstance(failure, dict) and failure.get("rank") == victim and "-9" in str(failure.get("message"))
    if not killed:
        why = "it never called torch.save" if failure is None else str(failure.get("message"))
        return Case(name, False, f"rank {victim} was not killed while saving its shard: {why}", TORN)
    return _loads(loads, 2, (1, 2), name, params, TORN)


def judge(record: dict[str, Any], params: dict[str, Any]) -> list[Case]:
    """Round trips and their calls on each world size, the untrusted folder, then the kills."""
    load = dg.field(record, "load", dict)
    if stop := dg.failure_case(load, f"loading runs within {TIMEOUT_S:g} s", {"raised": TORN}):
        return [stop]
    lr = dg.field(dg.ranks_of(load, 1), 0, dict)
    if "failure" in lr:
        return [Case("the module imports", False, str(lr["failure"].get("message")), TORN)]
    loads, cases = dg.field(lr, "loads", dict), []
    worlds = [int(w) for w in params["worlds"]]
    for w, rt in zip(worlds, dg.field(record, "round_trips", list, len(worlds)), strict=True):
        if stop := dg.failure_case(rt, f"saving on {w} ranks within {TIMEOUT_S:g} s", {dg.SOME_RANKS: ORDER}):
            cases.append(stop)
            continue
        ranks = dg.ranks_of(rt, w)
        if bad := [(r, x) for r, x in enumerate(ranks) if isinstance(x, dict) and "failure" in x]:
            cases.append(Case(f"saving on {w} ranks", False, f"rank {bad[0][0]}: {bad[0][1]['failure'].get('message')}",
                              ORDER))
            continue
        events = [dg.field(x, "events", list) for x in ranks]
        rt_case = _loads(loads.get(f"rt{w}"), w, (2,), f"round trip on {w} ranks: step 2 loads on every rank, bit "
                         "for bit", params, TORN)
        if shared := _shared_targets(events):
            rt_case = Case(rt_case.name, False, f"{shared}: ranks overwriting each other's shard file (each rank "
                           "needs its own file name)", OVERWRITE)
        cases += [rt_case, *_order(events, w)]
    unsafe = [s for s in dg.field(lr, "weights_only", list) if s not in ("True", "default")]
    ran = dg.field(dg.field(lr, "evil", dict), "ran", bool)
    cases.append(Case("an untrusted shard is refused, never unpickled (torch.load with weights_only=True)",
                      not ran and not unsafe, "loading with weights_only=False ran code from the checkpoint folder "
                      f"({'a file was created by the pickle' if ran else 'torch.load called with weights_only=False'})",
                      TRUST))
    kills = dg.field(record, "kills", list)
    for (victim, _), run in zip(params["kills"], kills, strict=False):
        cases.append(_kill(run, int(victim), loads.get(f"kill{victim}"), params))
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
OVERWRITE = ("Every rank runs the same save_sharded. What makes rank 0's file name differ from rank 1's?",
             "Put the rank in the shard's name: step-N/shard-{rank}.pt (and its temporary file shard-{rank}.tmp).")


register_build(BuildExercise(
    key=KEY, stub="sharded_ckpt.py",
    task="In build/sharded_ckpt.py write save_sharded(state, folder, step) (every rank writes its shard with "
         "torch.save; rank 0 commits a manifest last) and load_sharded(folder, rank) -> (step, state) or None "
         "(torch.load with weights_only=True). Checked on 2 and 4 gloo ranks: a round trip, real SIGKILLs half-way "
         "through a shard, fsync before every rename, the commit order, one file per rank, and an untrusted shard "
         "refused.",
    hint=("A kill can strike any rank at any byte: which single file decides what a reader sees?",
          "Shards first (write, fsync, rename), then a collective, then rank 0's manifest (write, fsync, rename)."),
    worked="Each rank torch.saves its state to step-N/shard-r.tmp, flushes and fsyncs it, os.replaces it to "
           "shard-r.pt; dist.all_gather_object collects every shard's name and SHA-256 (it is also the barrier); "
           "rank 0 writes manifest.json.tmp with the step and the checksums, fsyncs it and os.replaces it over "
           "manifest.json; a last barrier. load_sharded reads manifest.json, checks the shard's SHA-256 and "
           "torch.loads it with weights_only=True.",
    draw=draw, collect=collect, judge=judge,
))
