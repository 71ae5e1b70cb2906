"""Notebook 02's coding exercise: a 1F1B schedule, executed by the lab's pipeline simulator.

The learner writes ``one_f_one_b(rank, p, m)``: the program order of one pipeline rank
as a list of ``("F", i)`` / ``("B", i)``. The cases run the orders of all ranks through
:func:`labkit.sim.replay_schedule` (the event simulator that replays the real runs'
measured durations in notebook 02), which places every action after the messages it
waits for. An order passes when it runs every micro-batch once forward and once
backward, does not deadlock, keeps no more than ``p - rank`` micro-batches in flight
(the memory bound that makes 1F1B worth having: Narayanan et al., SOSP 2019, PipeDream;
GPipe keeps all ``m``), and leaves the bubble of the formula (p-1)/(m+p-1).
"""

from __future__ import annotations

from collections.abc import Callable

from labkit.errors import LabkitError
from labkit.practice.coding import Case, CodingExercise, attempt, register

SIZES = ((2, 4), (4, 8), (4, 4), (3, 7))
T_F, T_B = 1.0, 2.0


def _order(fn: Callable[[int, int, int], list], p: int, m: int):
    from labkit.sim import Action

    return {r: [Action(r, str(ph), int(i)) for ph, i in fn(r, p, m)] for r in range(p)}


def _complete(acts: list, m: int) -> bool:
    """Each micro-batch 0..m-1 forward once and then backward once, in that order."""
    seen: list[tuple[str, int]] = []
    for a in acts:
        if a.phase == "B" and ("F", a.microbatch) not in seen:
            return False
        seen.append((a.phase, a.microbatch))
    return sorted(seen) == sorted((ph, i) for ph in "FB" for i in range(m))


COMPLETE = ("Does each micro-batch 0..m-1 appear once as F and once as B in every rank's list, its F first?",
            "After the last forward a rank still owes the backwards of the micro-batches it holds: run them, in order.")
MEMORY = ("How many micro-batches has rank r run forward but not yet backward, at most, in your order? 1F1B bounds "
          "that by p - rank; GPipe holds all m.",
          "Once p - rank forwards are in flight, run one backward before each further forward.")
DEADLOCK = ("Rank r's first backward arrives only after its micro-batch has passed every later stage: how many "
            "forwards can rank r run before it?",
            "A rank that waits for a backward before it has sent enough forwards waits on itself: rank r can run "
            "p - rank forwards first.")
BUBBLE = ("Your order is complete and within memory, but the pipeline idles longer than (p-1)/(m+p-1): does each rank "
          "warm up with enough forwards?",
          "Warm up with exactly p - rank forwards, no fewer, before the first backward.")


def run(fn: Callable[[int, int, int], list]) -> list[Case]:
    from labkit.sim import bubble_fraction, measured_bubble, peak_in_flight, replay_schedule

    cases = []
    for p, m in SIZES:
        name = f"p={p}, m={m}"
        order, failed = attempt(name, lambda p=p, m=m: _order(fn, p, m))
        if failed:
            cases.append(failed)
            continue
        wrong = [r for r, acts in order.items() if not _complete(acts, m)]
        if wrong:
            cases.append(Case(name, False, f"rank {wrong[0]} does not run F and then B of each micro-batch "
                                           f"0..{m - 1} exactly once", COMPLETE))
            continue
        peaks = {r: peak_in_flight(acts) for r, acts in order.items()}
        over = [r for r, k in peaks.items() if k > p - r]
        if over:
            r = over[0]
            cases.append(Case(name, False, f"rank {r} keeps {peaks[r]} micro-batches in flight; 1F1B keeps at most "
                                           f"p - rank = {p - r} (that is GPipe's memory, not 1F1B's)", MEMORY))
            continue
        try:
            tl = replay_schedule(order, p, {a: T_F if a.phase == "F" else T_B for acts in order.values()
                                            for a in acts})  # fmt: skip
        except LabkitError as err:
            cases.append(Case(name, False, f"the ranks deadlock: {err}", DEADLOCK))
            continue
        bubble, want = measured_bubble(tl), bubble_fraction(p, m)
        ok = abs(bubble - want) < 1e-9
        cases.append(Case(name, ok, "" if ok else f"bubble {bubble:.3f}, the formula gives (p-1)/(m+p-1) = {want:.3f}",
                          BUBBLE))
    return cases


register(CodingExercise(
    "02.code.one_f_one_b",
    "Write one_f_one_b(rank, p, m) -> list of ('F', i) / ('B', i): rank's program order in a 1F1B pipeline of p "
    "stages and m micro-batches (m >= p).",
    run,
    ("1F1B bounds what a rank holds: how many forwards must rank r run before its first backward can come back?",
     "Return, for each rank, a list of ('F', i) and ('B', i) tuples in the order that rank runs them."),
    "rank r runs w = min(p - r, m) forwards (warm-up), then in turn one backward and one forward while forwards "
    "remain (steady state), then the remaining backwards (cool-down), each in micro-batch order.",
))
