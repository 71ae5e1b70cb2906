"""02.build.onef1b on real ranks: the reference passes on 2 and 4 ranks (and the hidden 3), the stub is "not
written yet" without processes, and each typical bug (a named edit of the reference, tests/build_mutate.py) fails
with its own name and no other's: a sequential executor (whose schedule_1f1b is right), GPipe's order, a stash
popped newest-first, no accumulation, the loss not divided by m, recv/recv and send/send deadlocks, and a
collective only some ranks call.

Cost: about 14 s on two loaded cores with the forkserver's preload (records._preload; about 45 s without): the
mutants run p=2 only; the two deadlocks are stopped after a 4 s timeout each (8 s of the total).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from build_mutate import mutant

from labkit.practice import build
from labkit.practice.build import diagnosis as dg
from labkit.practice.build import onef1b, records
from labkit.practice.build.feedback import feedback
from labkit.practice.build.onef1b_judge import BUGS, FAULT_HINTS

ROOT = Path(__file__).resolve().parent.parent
SEED = 3
LOOP = "    for phase, i in schedule_1f1b(rank, world_size, m):"
POP = "x, out = stash.pop(i)"
SEND_OUT = "sends.append(dist.isend(out.detach().contiguous(), rank + 1))"
WAIT = "    for work in sends:\n"
NAMES = {**{k: n for k, (n, _) in BUGS.items()}, "recv_recv": dg.RECV_RECV, "send_send": dg.SEND_SEND,
         "some_ranks": dg.SOME_RANKS}
MUTATIONS = {
    "sequential": [(LOOP, '    for phase, i in [(ph, j) for j in range(m) for ph in "FB"]:')],
    "gpipe": [(LOOP, '    for phase, i in [("F", j) for j in range(m)] + [("B", j) for j in range(m)]:')],
    "stash": [(POP, "x, out = stash.popitem()[1]")],
    "no_accumulation": [(POP, POP + "\n            stage.zero_grad()")],
    "not_divided": [("out = loss / m", "out = loss")],
    "recv_recv": [(SEND_OUT, "later.append(out.detach().contiguous())"),
                  ("sends, losses = [], []", "sends, losses, later = [], [], []"),
                  (WAIT, "    for t in later:\n        dist.send(t, rank + 1)\n" + WAIT)],
    "send_send": [(SEND_OUT, "dist.send(out.detach().contiguous(), rank + 1)"),
                  ("sends.append(dist.isend(x.grad.contiguous(), rank - 1))",
                   "dist.send(x.grad.contiguous(), rank - 1)")],
    "some_ranks": [(WAIT, "    if first:\n        dist.barrier()\n" + WAIT)],
}


@pytest.mark.procs
@pytest.mark.parametrize("path", [ROOT / "instructor" / "build" / "onef1b.py", ROOT / "tests" / "build_independent" /
                                  "onef1b.py"], ids=["reference", "independent"])  # fmt: skip
def test_a_correct_executor_passes_visible_and_hidden_runs(path):
    fb = build.check_build(onef1b.KEY, path, seed=SEED, hidden=True)
    assert fb.ok, str(fb)
    assert "p=4: rank 0 holds min(p, m) = 4 micro-batches" in str(fb) and "hidden 1: p=3" in str(fb)
    assert "measured bubble" in str(fb) and "message latency" in str(fb)  # shown, with why it differs


def test_blank_stub_is_not_written_yet_without_processes(tmp_path, monkeypatch):
    monkeypatch.setattr(records, "ranks", lambda *a, **k: pytest.fail("a blank stub started processes"))
    fb = build.check_build(onef1b.KEY, build.open_stub(onef1b.KEY, tmp_path))
    assert not fb.ok and str(fb).startswith("Not written yet")


@pytest.mark.procs
@pytest.mark.parametrize("bug", sorted(MUTATIONS))
def test_each_bug_fails_with_its_own_name(bug, tmp_path):
    params = {**build.draw_params(onef1b.KEY, SEED), "runs": [[2, 4]], "timeout_s": 4.0}
    record = build.collect_record(onef1b.KEY, mutant(tmp_path, "onef1b.py", *MUTATIONS[bug]), params)
    cases = build.judge_record(onef1b.KEY, record, params)
    text = "\n".join(f"{c.name}: {c.detail}" for c in cases if not c.ok)
    assert NAMES[bug] in text, text
    assert not [n for k, n in NAMES.items() if k != bug and n in text], text
    hint = BUGS[bug][1][0] if bug in BUGS else FAULT_HINTS[NAMES[bug]][0]
    assert f"Hint 1: {hint}" in str(feedback(onef1b.KEY, cases))  # the hint of the bug found
