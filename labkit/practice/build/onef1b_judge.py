"""The trusted judge of the 1F1B build-it: one process's reference computed here, the executed order compared with
1F1B's on every stage (Narayanan et al., "PipeDream", SOSP 2019; Megatron-LM's schedule, SC 2021), the bug named.

The record (:mod:`labkit.practice.build.onef1b_rank`) says what each rank executed: forward calls with their
inputs, and backwards stamped with the forward whose graph they ran. The judge tells which micro-batch each
forward was by matching its input against its own reference activations of that stage, so the order it compares
is the order the rank really ran (``labkit.sim.schedule("1f1b", p, m)`` is the reference order). The peak of live
activations on rank 0 must equal min(p, m) micro-batches: 1F1B's warm-up holds exactly that many (fewer means no
pipelining, more means GPipe). The measured bubble is shown beside the schedule's (p - 1) / (m + p - 1), not
graded: a micro-batch of this tiny model computes for microseconds while each message between ranks takes about a
millisecond (gloo on loopback, ranks sharing two cores), so wall-clock idle measures message latency rather than
the schedule's idle slots (measured 0.89 against 0.20 for p=2, m=4 with the reference); the executed order, which
shows the schedule, is graded instead.
"""

from __future__ import annotations

import torch
from torch import nn

from labkit.practice.build import diagnosis as dg
from labkit.practice.build.onef1b_rank import data, grads, model
from labkit.practice.coding import Case
from labkit.sim import bubble_fraction, schedule

TOL = 1e-6  # the same sums in the same order as one process: equal in practice to the bit
BUGS: dict[str, tuple[str, tuple[str, str]]] = {
    "sequential": ("sequential executor", ("How many micro-batches has rank 0 started before its first backward?",
                                           "p - r forwards first (the warm-up), then one backward, one forward.")),
    "gpipe": ("GPipe order", ("When does rank 0 run its first backward?",
                              "After p - r forwards, not after all m: then alternate one backward, one forward.")),
    "stash": ("stash popped newest-first", ("Which micro-batch's saved graph does backward i run on?",
                                            "Key the stash by micro-batch and pop(i), never the newest entry.")),
    "no_accumulation": ("gradients not accumulated over micro-batches", (
        "What happens to .grad when a second micro-batch runs backward?",
        "Never zero the gradients inside the step: autograd adds each micro-batch's into .grad.")),
    "not_divided": ("loss not divided by m", ("The step's loss is the mean over m micro-batches: what do you call "
                                              "backward on?", "On the last rank: (loss_fn(out, target) / m).backward()"
                                              ", and return the undivided losses.")),
}
FAULT_HINTS = {
    dg.RECV_RECV: ("Which message is each rank waiting for, and when does its peer send it?",
                   "Post every send before you block in a receive: dist.isend the activation right after forward."),
    dg.SEND_SEND: ("A blocking send returns when the peer receives: where is the peer then?",
                   "Send without blocking (dist.isend, wait on the works at the end); receive when needed."),
    dg.SOME_RANKS: ("Does every rank call the same collectives (barrier, all_reduce) as the others?",
                    "A step of 1F1B needs only point-to-point calls: drop the collective, or call it on every rank."),
    "raised": ("Which line of your module raised, on which rank (see the error)?",
               "Check the shapes sent and received: every message is a tensor of `shape`."),
}


def reference(params: dict, p: int, m: int) -> dict:
    """One process runs the whole model over the m micro-batches: each stage's inputs, the losses, the gradients
    of the mean loss per stage, and (for the diagnosis) those the last micro-batch leaves alone."""
    stages, (xs, ys) = model(p, params["width"], params["seed"]), data(params, m)
    inputs, losses = [[] for _ in range(p)], []
    for x, y in zip(xs, ys, strict=True):
        h = x
        for r, stage in enumerate(stages):
            inputs[r].append(h.detach().clone())
            h = stage(h)
        loss = nn.functional.mse_loss(h, y)
        losses.append(float(loss.detach()))
        (loss / m).backward()
    lone = model(p, params["width"], params["seed"])
    h = xs[-1]
    for stage in lone:
        h = stage(h)
    (nn.functional.mse_loss(h, ys[-1]) / m).backward()
    return {"inputs": inputs, "losses": losses, "grads": [grads(s).double() for s in stages],
            "last_only": [grads(s).double() for s in lone]}


def order(p: int, m: int) -> list[list[tuple[str, int]]]:
    """1F1B's order on every rank, from labkit.sim."""
    return [[(a.phase, a.microbatch) for a in acts] for _, acts in sorted(schedule("1f1b", p, m).items())]


def executed(rank_report: dict, ref_inputs: list[torch.Tensor]) -> list[tuple[str, int]]:
    """What a rank ran, as (phase, micro-batch): each forward's micro-batch found by its input (-1: none fits)."""
    events = dg.field(rank_report, "events", list)
    inputs = [dg.tensor(rank_report["inputs"], k, tuple(ref_inputs[0].shape)) for k in range(
        len(dg.field(rank_report, "inputs", list)))]  # fmt: skip
    which = []
    for t in inputs:
        diffs = [float((t - r.double()).abs().max()) for r in ref_inputs]
        best = min(range(len(diffs)), key=diffs.__getitem__)
        which.append(best if diffs[best] <= 1e-5 else -1)
    out = []
    for ev in events:
        if not (isinstance(ev, list) and len(ev) == 4 and ev[0] in ("F", "B") and isinstance(ev[1], int)):
            raise dg.BadRecord(f"an event must be [phase, forward number, start, end] (got {ev!r})"[:200])
        out.append((ev[0], which[ev[1]] if 0 <= ev[1] < len(which) else -1))
    return out


def _lifo(want: list[tuple[str, int]]) -> list[tuple[str, int]]:
    """What a rank runs when its stash pops the newest entry instead of micro-batch i."""
    stack, out = [], []
    for ph, i in want:
        if ph == "F":
            stack.append(i)
            out.append((ph, i))
        else:
            out.append(("B", stack.pop() if stack else -1))
    return out


def _bug(p: int, key: str, why: str) -> Case:
    name, hints = BUGS[key]
    return Case(f"p={p}: the bug found", False, f"{name}: {why}", hints)


def diagnose(p: int, m: int, runs: list, want: list, ref: dict, reps: list) -> Case:
    """The case naming the bug the evidence shows: the executed order first, then the gradients."""
    got = runs[0]
    if got != want[0]:
        if got == [(ph, i) for i in range(m) for ph in "FB"]:
            return _bug(p, "sequential", f"rank 0 ran {got[:4]}...: each micro-batch's backward before the next "
                        f"forward, one micro-batch at a time; 1F1B starts {want[0][:4]}...")
        if got == [("F", i) for i in range(m)] + [("B", i) for i in range(m)]:
            return _bug(p, "gpipe", f"rank 0 ran all {m} forwards before its first backward")
    for r in range(p):
        if runs[r] != want[r] and runs[r] == _lifo(want[r]):
            j = next(j for j, (a, b) in enumerate(zip(runs[r], want[r], strict=True)) if a != b)
            return _bug(p, "stash", f"rank {r} ran {runs[r][j]} where 1F1B runs {want[r][j]}: the backwards took "
                        "the micro-batches in another order than their forwards (permuted)")
    bad = next((r for r in range(p) if runs[r] != want[r]), None)
    if bad is not None:
        j = next(j for j, (a, b) in enumerate(zip(runs[bad], want[bad], strict=False)) if a != b) if any(
            a != b for a, b in zip(runs[bad], want[bad], strict=False)) else min(len(runs[bad]), len(want[bad]))
        return Case(f"p={p}: the bug found", False, f"rank {bad}'s order differs from 1F1B's at action {j + 1}: "
                    f"it ran {runs[bad][j:j + 3]}, 1F1B runs {want[bad][j:j + 3]}", BUGS["gpipe"][1])
    mine, mean, lone = [r["grads"] for r in reps], ref["grads"], ref["last_only"]
    ratio = float(sum(a @ b for a, b in zip(mine, mean, strict=True)) / sum(b @ b for b in mean))
    if abs(ratio - m) < 1e-3 * m:
        return _bug(p, "not_divided", f"the gradients are {ratio:.4g} x the mean loss's (m = {m})")
    if max(float((a - b).abs().max()) for a, b in zip(mine, lone, strict=True)) <= TOL:
        return _bug(p, "no_accumulation", "only the last micro-batch's gradient is left")
    r = max(range(p), key=lambda r: float((mine[r] - mean[r]).abs().max()))
    return Case(f"p={p}: the bug found", False, f"no typical bug fits: rank {r}'s gradients differ most, by "
                f"{float((mine[r] - mean[r]).abs().max()):.3g}")


def _read(run: dict, p: int, m: int, params: dict) -> list[dict]:
    numel = params["width"] * params["width"] + params["width"]
    reps = []
    for rep in dg.ranks_of(run, p):
        losses = dg.field(rep, "losses", list)
        if not all(isinstance(v, float) for v in losses):
            raise dg.BadRecord("losses must be floats")
        reps.append({"grads": dg.tensor(rep, "grads", (numel,)), "losses": losses,
                     "peak": dg.field(rep, "peak_bytes", int), "first": dg.field(rep, "first_forward_bytes", int),
                     "start": float(dg.field(rep, "start", float)), "end": float(dg.field(rep, "end", float)),
                     "events": dg.field(rep, "events", list)})
    return reps


def _messages(run: dict, p: int, m: int, size: int) -> Case:
    """Each stage's point-to-point traffic, from its op log: m activations to r+1 and m gradients to r-1, each of
    ``size`` elements, and as many received from each side."""
    wrong = []
    for r, log in enumerate(dg.field(run, "ops", list, p)):
        got: dict[tuple[str, int], list[int]] = {}
        for op in log:
            if isinstance(op, list) and len(op) == 5 and op[0] in ("send", "isend", "recv", "irecv"):
                got.setdefault(("send" if "send" in op[0] else "recv", op[1]), []).append(op[2])
        want = {(d, q): [size] * m for d in ("send", "recv") for q in (r - 1, r + 1) if 0 <= q < p}
        if got != want:
            wrong.append(f"rank {r}: " + ", ".join(f"{d} {'to' if d == 'send' else 'from'} {q}: {len(v)} x "
                                                  f"{sorted(set(v))}" for (d, q), v in sorted(got.items())))
    return Case(f"p={p}: each stage sends and receives m = {m} messages of {size} elements each way", not wrong,
                "; ".join(wrong)[:600])


def judge_run(run: dict, p: int, m: int, params: dict) -> list[Case]:
    """The cases of one (p, m) run, and, when one fails, the case naming the bug found."""
    fail = dg.failure_case(run, f"p={p}: your 1F1B step runs on {p} ranks", FAULT_HINTS)
    if fail:
        return [fail]
    reps, ref, want = _read(run, p, m, params), reference(params, p, m), order(p, m)
    runs = [executed(rep, ref["inputs"][r]) for r, rep in enumerate(run["ranks"])]
    bad = [r for r in range(p) if runs[r] != want[r]]
    cases = [Case(f"p={p}, m={m}: every stage ran 1F1B's order (F/B per micro-batch, as executed)", not bad,
                  "" if not bad else f"rank {bad[0]} ran {runs[bad[0]]}; 1F1B runs {want[bad[0]]}")]
    cases.append(_messages(run, p, m, params["rows"] * params["width"]))
    got = reps[-1]["losses"]
    ok = len(got) == m and max(abs(a - b) for a, b in zip(got, ref["losses"], strict=True)) <= TOL
    cases.append(Case(f"p={p}: the {m} losses equal one process's", ok, "" if ok else
                      f"expected {[round(v, 6) for v in ref['losses']]}, got {got}"))
    diff = max(float((rep["grads"] - g).abs().max()) for rep, g in zip(reps, ref["grads"], strict=True))
    cases.append(Case(f"p={p}: the gradients equal one process's (within {TOL:g})", diff <= TOL,
                      "" if diff <= TOL else f"largest difference {diff:.3g}"))
    peak = reps[0]["peak"] / reps[0]["first"] if reps[0]["first"] else 0.0
    want_peak = min(p, m)
    ok = abs(peak - want_peak) < 1e-6
    cases.append(Case(f"p={p}: rank 0 holds min(p, m) = {want_peak} micro-batches of activations at its peak "
                      "(measured)", ok, "" if ok else f"{peak:g} micro-batches alive at once"))
    span = max(r["end"] for r in reps) - min(r["start"] for r in reps)
    busy = sum(ev[3] - ev[2] for rep in reps for ev in rep["events"] if isinstance(ev[2], float | int))
    bubble = 1 - busy / (p * span) if span > 0 else 0.0
    cases.append(Case(f"p={p}: measured bubble {bubble:.2f} beside the schedule's {bubble_fraction(p, m):.2f} "
                      "(shown, not graded)", True, "a micro-batch here computes for microseconds while a message "
                      "between ranks takes about a millisecond (gloo on loopback, ranks sharing two cores), so the "
                      "wall-clock bubble measures message latency, not the schedule's idle slots; the executed order "
                      "is graded instead"))
    if not all(c.ok for c in cases):
        cases.append(diagnose(p, m, runs, want, ref, reps))
    return cases
