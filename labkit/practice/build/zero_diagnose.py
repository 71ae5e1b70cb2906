"""Which ZeRO bug the evidence shows: cheap experiments on the record that tell the typical bugs apart, each named.

The judge (:mod:`labkit.practice.build.zero_judge`) finds THAT a run is wrong; this module finds WHICH bug it is,
trying the explanations in an order where each test is decisive: the shard's size (no sharding, a world size
hard-coded to 2, unpadded bounds), the gradient bytes left after backward (ZeRO-2), the collectives run (reduced
twice, missing all-gather), the ratio of what AdamW saw to the mean gradient (x N: a sum, x 1/N: averaged twice),
which rank's shard is off, parameters equal to the reference's previous step (stale all-gather), the gradient
growing across steps (never reset), and the trajectory matching AdamW with one of torch's defaults (ignored
arguments). Each bug has its own hints, a question then a direction.
"""

from __future__ import annotations

import torch

from labkit.practice.build import diagnosis as dg
from labkit.practice.build.zero_common import flat, mlp, numel_of, padded
from labkit.practice.build.zero_reference import TOL, grad_at, pad, ratio, traffic, trajectory
from labkit.practice.coding import Case

BUGS: dict[str, tuple[str, tuple[str, str]]] = {
    "no_sharding": ("no sharding", ("How many elements does your torch.optim.AdamW hold states for?",
                                    "Give AdamW one tensor: this rank's shard of the flat padded parameters.")),
    "full_grads": ("full gradients kept", ("After backward, which tensors still hold a whole gradient?",
                                           "In the gradient hook, keep your shard's part, then set p.grad = None.")),
    "hardcoded": ("world size hard-coded to 2", ("Does your code still work on 4 ranks?",
                                                 "Take the world size from dist.get_world_size(), never a constant.")),
    "unpadded": ("shard cut from unpadded bounds", ("Does every rank's shard have the same length, padded // N?",
                                                    "Pad first: padded = ceil(numel / N) * N; size = padded // N.")),
    "reduced_twice": ("reduced twice", ("How many times does each gradient element cross the wire in a step?",
                                        "The reduce-scatter already sums over the ranks: drop the extra all-reduce.")),
    "no_allgather": ("missing all-gather", ("After AdamW updates your shard, who else has it?",
                                            "All-gather the updated shards and copy them into every parameter.")),
    "sum": ("sum instead of mean", ("After the reduction, is your gradient the sum over the ranks or their mean?",
                                    "Divide the reduced shard by the world size before AdamW's step.")),
    "averaged_twice": ("averaged twice", ("How many times do you divide by the world size?",
                                          "Divide the reduced (summed) shard by N exactly once.")),
    "wrong_owner": ("reduced to the wrong rank", ("Which rank owns the slice you reduce, and is it the dst?",
                                                  "Reduce each slice to the rank whose shard holds it.")),
    "stale": ("stale parameters", ("When do your parameters receive the updated shards: before or after AdamW?",
                                   "Step AdamW on the shard first, then all-gather and copy back.")),
    "accumulated": ("gradients accumulated across steps", ("What does your shard's .grad hold at step 2?",
                                                           "Overwrite the shard's gradient each step (or zero it).")),
    "ignored": ("ignored optimizer arguments", ("Which of lr, betas, eps, weight_decay reach torch's AdamW?",
                                                "Pass every argument your __init__ receives on to torch.optim.AdamW.")),
}
FAULT_HINTS = {"raised": ("Which line of your module raised, on which rank (see the error)?",
                          "Check each tensor's length against the padded shard size: padded // world_size."),
               dg.SOME_RANKS: ("Does every rank call the same collectives, in the same order?",
                               "Every rank runs the reduce and the all-gather, whatever its rank.")}
TORCH = {"betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.01}  # torch.optim.AdamW's defaults
ALTERNATIVES = ({"lr": 1e-3}, {"betas": TORCH["betas"]}, {"eps": 1e-8}, {"weight_decay": 0.0}, {"weight_decay": 0.01},
                TORCH, {**TORCH, "weight_decay": 0.0}, {"lr": 1e-3, **TORCH})  # what a module that drops some uses


def _bug(n: int, key: str, why: str) -> Case:
    name, hints = BUGS[key]
    return Case(f"{n} ranks: the bug found", False, f"{name}: {why}", hints)


def bounds_of(params: dict) -> list[list[int]]:
    """The (numel, world) questions asked of ``shard_bounds``: the run's own and a few small ones."""
    numel = numel_of(params["width"])
    return [[10, 3], [8, 4], [1, 2], *([numel, w] for w in params["worlds"])]


def bounds_cases(run: dict, params: dict) -> list[Case]:
    """``shard_bounds`` alone, as rank 0 of the first ``run`` answered it: padding to a multiple of N and equal,
    adjacent shards."""
    if "failure" in run:
        return []  # the run's own failed case says why
    asked = bounds_of(params)
    got = dg.field(dg.ranks_of(run, run["world"])[0], "bounds", list, len(asked))
    cases = []
    for (numel, world), answer in zip(asked, got, strict=True):
        big = padded(numel, world)
        want = [[r * big // world, (r + 1) * big // world, big] for r in range(world)]
        ok = answer == want
        unpadded = isinstance(answer, list) and len(answer) == world and all(
            isinstance(b, list) and len(b) == 3 for b in answer) and sum(b[1] - b[0] for b in answer) < big
        cases.append(Case(f"shard_bounds({numel}, r, {world}) pads to {big}", ok, "" if ok else
                          (f"{BUGS['unpadded'][0]}: " if unpadded and big != numel else "") +
                          f"expected {want}, got {answer}", BUGS["unpadded"][1]))
    return cases


def failed_run(run: dict, params: dict, n: int) -> list[Case]:
    """What a run that raised or hung says about the shard, from the sizes the ranks noted before it stopped."""
    numel = numel_of(params["width"])
    notes = run.get("notes") if isinstance(run.get("notes"), list) else []
    sizes = [note.get("inner_numel") for note in notes if isinstance(note, dict)]
    if not sizes or sizes[0] is None:
        return []
    if n != 2 and sizes[0] == padded(numel, 2) // 2:
        return [_bug(n, "hardcoded", f"rank 0's shard has {sizes[0]} elements, padded // 2; on {n} ranks a shard "
                     f"has {padded(numel, n) // n}")]
    if sizes[0] != padded(numel, n) // n and sizes[0] in (numel // n, -(-numel // n)):
        return [_bug(n, "unpadded", f"rank 0's shard has {sizes[0]} elements, cut from {numel} unpadded "
                     f"parameters; padded // N is {padded(numel, n) // n}")]
    return []


def _per_rank_ok(reps: list[dict], mean: torch.Tensor, shard: int) -> list[bool]:
    out = []
    for r, rep in enumerate(reps):
        seen, want = rep["inner_grad"][0], mean[r * shard:(r + 1) * shard]
        out.append(seen.shape == want.shape and float((seen - want).abs().max()) <= 1e-6 * float(want.abs().max()))
    return out


def diagnose(run: dict, reps: list[dict], ref: list, params: dict, stage: int, fit: tuple | None) -> Case:
    """The one case naming the bug the evidence shows (or, if none fits, which rank and shard differ)."""
    n, numel = run["world"], numel_of(params["width"])
    big, shard = padded(numel, n), padded(numel, n) // n
    inner = [r["inner_numel"] for r in reps]
    if all(i >= numel for i in inner):
        return _bug(n, "no_sharding", f"every rank's AdamW holds states for {inner[0]} elements "
                    f"({reps[0]['state_bytes']} bytes), not its {shard}-element shard")
    failed = failed_run(run, params, n)
    if failed:
        return failed[0]
    if stage == 2 and max(max(r["held"]) for r in reps):
        return _bug(n, "full_grads", f"{max(max(r['held']) for r in reps)} bytes of .grad left on the model "
                    f"after backward, where only the {4 * shard}-byte shard should remain")
    kinds = traffic(run, 0, 0)
    if "all_reduce" in kinds and {"reduce_scatter", "reduce"} & set(kinds):
        return _bug(n, "reduced_twice", f"an all-reduce AND a reduce in one step ({kinds} elements)")
    apart = max(float((r["params"][-1] - reps[0]["params"][-1]).abs().max()) for r in reps)
    if "all_gather" not in kinds or apart > 0:
        return _bug(n, "no_allgather", f"the step ran {sorted(kinds)}; the ranks' parameters differ by {apart:.3g}")
    mean = pad(ref[0][1], big)
    if fit is not None and fit[1] < 1e-3:
        if abs(fit[0] - n) < 1e-3 * n:
            return _bug(n, "sum", f"AdamW saw {fit[0]:.4g} x the mean gradient (N = {n})")
        if abs(fit[0] - 1 / n) < 1e-3:
            return _bug(n, "averaged_twice", f"AdamW saw {fit[0]:.4g} x the mean gradient, 1/N (N = {n})")
    ok = _per_rank_ok(reps, mean, shard)
    if stage == 2 and ok[0] and not all(ok):
        wrong = [r for r, good in enumerate(ok) if not good]
        return _bug(n, "wrong_owner", f"rank 0's shard gradient is right, rank {wrong}'s are not")
    theta0 = flat(mlp(params["width"], params["seed"])).to(torch.float64)
    first = reps[0]["params"][0]
    if float((first - theta0).abs().max()) <= TOL < float((ref[0][0].double() - theta0).abs().max()) / 100:
        return _bug(n, "stale", "after step 1 the parameters are still the initial ones (the reference's "
                    "previous step): the all-gather ran before AdamW's step")
    if all(ok) and params["steps"] >= 2:
        g1 = pad(grad_at(first, params, 1), big)
        fresh = [g1[r * shard:(r + 1) * shard] for r in range(n)]
        seen = [rep["inner_grad"][1] for rep in reps]
        if all(s.shape == f.shape for s, f in zip(seen, fresh, strict=True)):
            left = torch.cat([s - f for s, f in zip(seen, fresh, strict=True)])  # what step 2 saw beyond its own
            before = torch.cat([rep["inner_grad"][0] for rep in reps])
            c, rest = ratio([left], [before])
            if c > 0.05 and rest < 1e-3:
                return _bug(n, "accumulated", f"step 2's gradient is its own plus {c:.3g} x step 1's: it grows "
                            "across steps (never reset)")
    for alt in ALTERNATIVES:
        other = trajectory(params, **alt)
        if max(float((reps[0]["params"][k] - o.double()).abs().max()) for k, (o, _) in enumerate(other)) <= TOL:
            what = ", ".join(f"{a}={v}" for a, v in alt.items())
            return _bug(n, "ignored", f"the parameters match AdamW with {what}, not the drawn "
                        + ", ".join(f"{a}={params[a]}" for a in alt))
    step, rank = next(((k, r) for k in range(len(ref)) for r in range(n)
                       if float((reps[r]["params"][k] - ref[k][0].double()).abs().max()) > TOL), (0, 0))  # fmt: skip
    where = int((reps[rank]["params"][step] - ref[step][0].double()).abs().argmax())
    return Case(f"{n} ranks: the bug found", False, f"no typical bug fits: rank {rank} first differs at step "
                f"{step + 1}, most at element {where} (shard {where // shard} of {n})")
