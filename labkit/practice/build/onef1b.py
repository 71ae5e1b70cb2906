"""Build it yourself, notebook 02: a 1F1B pipeline executor over send/recv (Narayanan et al., "PipeDream",
SOSP 2019; the schedule as Megatron-LM runs it, SC 2021), graded on 2 and 4 real ranks (a hidden 3).

The check is split by trust (:mod:`labkit.practice.build.harness`): :func:`collect` starts the ranks that run the
learner's ``run_1f1b`` on a stage that records what it executes (:mod:`labkit.practice.build.onef1b_rank`), and
rank 0 of the first run answers ``schedule_1f1b`` for a few (p, m); :func:`judge` computes one process's
reference itself (:mod:`labkit.practice.build.onef1b_judge`). Checked: the order every stage EXECUTED is 1F1B's
(a sequential executor, GPipe's order and a stash popped newest-first each fail it, and are named), the losses and
accumulated gradients equal one process's, rank 0's measured peak of live activations is min(p, m) micro-batches;
the measured bubble is shown beside the schedule's with the reason it differs. A run that hangs is stopped at
``timeout_s`` and named from where each rank was blocked (recv/recv, send/send, a collective only some ranks call).
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from labkit.practice.build import diagnosis as dg
from labkit.practice.build import records
from labkit.practice.build.harness import BuildExercise, register_build
from labkit.practice.build.onef1b_judge import BUGS, judge_run, order
from labkit.practice.build.onef1b_rank import onef1b_rank
from labkit.practice.coding import Case

KEY = "02.build.onef1b"
ASKED = ([2, 4], [4, 6], [3, 3])  # (p, m) whose schedule_1f1b lists are compared, besides the runs' own
HOW = ("How many forwards does rank r run before its first backward?",
       "p - r forwards, then one backward and one forward each, then the remaining backwards.")


def draw(seed: int) -> dict[str, Any]:
    """The runs (p, m), m > p so GPipe's order shows; the data seed; a hang is stopped after ``timeout_s``."""
    rng = random.Random(seed)
    return {"runs": [[2, rng.choice([4, 5])], [4, rng.choice([5, 6])]], "width": 16, "rows": 4, "timeout_s": 15.0}


def asked(params: dict) -> list[list[int]]:
    return [list(pm) for pm in dict.fromkeys(tuple(x) for x in (*ASKED, *params["runs"]))]


def collect(path: Path, params: dict) -> dict[str, Any]:
    """(UNTRUSTED side.) Each (p, m) run in turn; after one that failed the rest are not started (a deadlock
    costs its timeout once)."""
    runs = []
    for i, (p, m) in enumerate(params["runs"]):
        runs.append(records.ranks(onef1b_rank, p, path, timeout=params["timeout_s"], m=m,
                                  params={**params, "ask": asked(params) if i == 0 else []}))
        if "failure" in runs[-1]:
            break
    return {"runs": runs}


def schedule_cases(run: dict, params: dict) -> list[Case]:
    """``schedule_1f1b`` alone, as rank 0 of the first run answered it, against labkit.sim.schedule."""
    got = dg.field(dg.ranks_of(run, run["world"])[0], "schedules", list, len(asked(params)))
    cases = []
    for (p, m), answer in zip(asked(params), got, strict=True):
        want = [[list(a) for a in acts] for acts in order(p, m)]
        bad = next((r for r in range(p) if not isinstance(answer, list) or answer[r:r + 1] != want[r:r + 1]), None)
        gpipe = bad is not None and isinstance(answer, list) and len(answer) > bad and all(
            isinstance(a, list) and a[:1] == ["F"] for a in answer[bad][:m])  # fmt: skip
        shown = answer if isinstance(answer, str) else answer[bad:bad + 1] if bad is not None else ""
        cases.append(Case(f"schedule_1f1b order for p={p}, m={m}", bad is None, "" if bad is None else
                          (f"{BUGS['gpipe'][0]} (all forwards first): " if gpipe else "") +
                          f"rank {bad}: expected {want[bad]}, got {shown}", BUGS["gpipe"][1] if gpipe else HOW))
    return cases


def judge(record: dict, params: dict) -> list[Case]:
    """(TRUSTED side.) The schedule's cases, then each run's; a run after a failed one says it was not run."""
    runs = dg.field(record, "runs", list)
    if not 1 <= len(runs) <= len(params["runs"]) or any("failure" in r for r in runs[:-1]):
        raise dg.BadRecord(f"expected one run per (p, m) up to the first failure (got {len(runs)})")
    cases = [] if "failure" in runs[0] else schedule_cases(runs[0], params)
    for run, (p, m) in zip(runs, params["runs"], strict=False):
        if dg.field(run, "world", int) != p:
            raise dg.BadRecord(f"run for p={p} reports world {run['world']}")
        cases += judge_run(run, p, m, params)
    cases += [Case(f"p={p}: runs (not started: the run before failed)", False) for p, _ in params["runs"][len(runs):]]
    return cases


register_build(BuildExercise(
    key=KEY, stub="onef1b.py",
    task="Write schedule_1f1b(rank, world_size, m) -> [('F', i) | ('B', i), ...] and run_1f1b(stage, rank, "
         "world_size, m, inputs, targets, loss_fn, shape) -> losses: one 1F1B step over send/recv. Checked on 2 "
         "and 4 ranks: the order each rank executes, the losses and gradients, the live activations on rank 0.",
    draw=draw, collect=collect, judge=judge,
    hint=("What does stage r need before its forward of micro-batch i, and before its backward?",
          "Forward: receive the activation from r-1 (rank 0 takes inputs[i]); backward: receive the gradient "
          "from r+1 (the last rank starts from loss / m); send the other way with dist.isend."),
    worked="Order: p - r forwards, then alternate one backward and one forward, then the remaining backwards. "
           "F i: x = inputs[i] on rank 0, else recv a tensor of `shape` from r-1 and set requires_grad; out = "
           "stage(x); the last rank computes loss = loss_fn(out, targets[i]), keeps loss / m; the others isend "
           "out.detach() to r+1; stash (x, out) under i. B i: pop (x, out) of micro-batch i; the last rank calls "
           "out.backward(), the others recv the gradient from r+1 and call out.backward(grad); every rank but 0 "
           "isends x.grad to r-1. Wait on every isend's work at the end; never zero .grad inside the step.",
))
