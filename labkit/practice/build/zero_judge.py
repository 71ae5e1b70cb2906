"""The trusted judge of ZeRO-1 and ZeRO-2's build-its: the reference computed here, the evidence compared, the bug
named (Rajbhandari et al., "ZeRO", SC 2020: stage 1 shards the optimizer states, 4 Psi + 8 Psi / N bytes per rank
in fp32; stage 2 the gradients too, 4 Psi + (4 + 8) Psi / N; both move 2 Psi per step).

Nothing here imports the learner's module: the record is plain data from :func:`zero_common.zero_rank`, read
strictly. The reference is torch's own ``AdamW`` on the whole batch with the drawn hyperparameters
(:mod:`labkit.practice.build.zero_reference`, parameters compared within its ``TOL``).
"""

from __future__ import annotations

from dataclasses import replace

from labkit.practice.build import diagnosis as dg
from labkit.practice.build.zero_common import MOMENT_BYTES, numel_of, padded
from labkit.practice.build.zero_diagnose import FAULT_HINTS, bounds_cases, diagnose, failed_run
from labkit.practice.build.zero_reference import TOL, pad, ratio, traffic, trajectory
from labkit.practice.coding import Case


def read_run(run: dict, params: dict) -> list[dict]:
    """The run's per-rank reports, strictly checked (types, lengths, shapes)."""
    n, numel, steps = run["world"], numel_of(params["width"]), params["steps"]
    out = []
    for rep in dg.ranks_of(run, n):
        rows = dg.field(rep, "steps", list, steps)
        inner = dg.field(rep, "inner_numel", int)
        out.append({"inner_numel": inner, "state_bytes": dg.field(rep, "state_bytes", int),
                    "params": [dg.tensor(r, "params", (numel,)) for r in rows],
                    "inner_grad": [dg.tensor(r, "inner_grad") for r in rows],
                    "held": [dg.field(r, "held_grad_bytes", int) for r in rows]})
    dg.field(run, "ops", list, n)
    return out


def judge_world(run: dict, params: dict, stage: int, cls: str) -> list[Case]:
    """The cases of one world size's run, and, when one fails, the case naming the bug found."""
    n, numel = run["world"], numel_of(params["width"])
    fail = dg.failure_case(run, f"{n} ranks: trains with your {cls}", FAULT_HINTS)
    if fail:
        named = failed_run(run, params, n)
        return [replace(fail, hints=()) if named else fail, *named]  # the named bug's hints, not the crash's
    reps, ref = read_run(run, params), trajectory(params)
    big, shard = padded(numel, n), padded(numel, n) // n
    cases = []
    held = [r["state_bytes"] for r in reps]
    ok = all(b == MOMENT_BYTES * shard for b in held)
    cases.append(Case(f"{n} ranks: optimizer states sharded, 8 Psi / N bytes per rank", ok, "" if ok else
                      f"{held} bytes per rank; 8 x {big} (padded) / {n} = {MOMENT_BYTES * shard}"))
    if stage == 2:
        kept = max(max(r["held"]) for r in reps)
        cases.append(Case(f"{n} ranks: no full gradient held after backward (4 Psi / N of gradients per rank)",
                          kept == 0, "" if kept == 0 else f"the model's parameters still hold {kept} bytes of "
                          f".grad after backward on some rank; ZeRO-2 keeps only the {4 * shard}-byte shard"))
    kinds = traffic(run, 0, 0)
    volume = sum(kinds.values())
    want = "reduce + all-gather" if stage == 2 else "reduce-scatter + all-gather"
    ok = kinds.get("all_gather") == big and volume in (numel + big, 2 * big) and "all_reduce" not in kinds
    named = ", ".join(f"{k} {v}" for k, v in sorted(kinds.items())) or "no collective"
    cases.append(Case(f"{n} ranks: traffic per step is 2 Psi ({want})", ok, "" if ok else
                      f"step 1 ran {named} elements on rank 0; 2 Psi with the padding is {2 * big}"))
    seen = [r["inner_grad"][0] for r in reps]
    mean = pad(ref[0][1], big)
    want_g = [mean[r * shard:(r + 1) * shard] for r in range(n)]
    fit = ratio(seen, want_g) if all(s.shape == w.shape for s, w in zip(seen, want_g, strict=True)) else None
    ok = fit is not None and abs(fit[0] - 1) < 1e-4 and fit[1] < 1e-4
    cases.append(Case(f"{n} ranks: AdamW sees this rank's shard of the mean gradient over the ranks", ok, "" if ok else
                      (f"what AdamW saw is {fit[0]:.3g} x the mean gradient's shard (N = {n})" if fit else
                       f"AdamW's gradients have {[s.numel() for s in seen]} elements per rank; a shard has {shard}")))
    apart = max(float((r["params"][k] - reps[0]["params"][k]).abs().max()) for r in reps for k in range(len(ref)))
    cases.append(Case(f"{n} ranks: every rank holds the same parameters after each step", apart == 0, "" if apart == 0
                      else f"the ranks' parameters differ by up to {apart:.3g}"))
    diff = max(float((reps[0]["params"][k] - ref[k][0]).abs().max()) for k in range(len(ref)))
    cases.append(Case(f"{n} ranks: parameters match torch's AdamW (the drawn lr, betas, eps, weight decay) on the "
                      f"whole batch after each of {len(ref)} steps (within {TOL:g})", diff <= TOL,
                      "" if diff <= TOL else f"largest difference {diff:.3g}"))
    if not all(c.ok for c in cases):
        cases.append(diagnose(run, reps, ref, params, stage, fit))
    return cases


def judge(record: dict, params: dict, stage: int, cls: str) -> list[Case]:
    """Every case of a ZeRO record: ``shard_bounds`` alone (asked in rank 0 of the first run), then each world
    size's run."""
    runs = dg.field(record, "runs", list, len(params["worlds"]))
    cases = bounds_cases(dg.field(runs, 0, dict), params)
    for world, run in zip(params["worlds"], runs, strict=True):
        if dg.field(run, "world", int) != world:
            raise dg.BadRecord(f"run for {world} ranks reports world {run['world']}")
        cases += judge_world(run, params, stage, cls)
    return cases
