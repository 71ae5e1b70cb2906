"""Notebook 08's coding exercise: an eviction policy, replayed on a real training step's trace.

The learner writes ``evict(resident, future)``: given the block ids now in fast memory and
the rest of the step's accesses in order, return the block to push out. The cases record
one real step of the tiny GPT (:func:`labkit.future.trace.record_trace`: every weight and
saved activation a forward or backward op touches), replay its access sequence through
a fast tier of a few sizes, and count misses. A policy passes when it misses no more
than Belady's MIN (evict the block whose next use is furthest away; Belady, IBM Systems
Journal 1966), which is optimal when the future is known, as it is for a training step
that repeats: what notebook 08's trace-aware schedule exploits. LRU misses more.

A real step's trace alone is too easy: "evict the block with the fewest remaining uses" happens
to match MIN there. :func:`adversarial` builds traces where the two part ways (a block used
many times, but only after others used soon), so only the furthest next use passes.
"""

from __future__ import annotations

from collections.abc import Callable

from labkit.practice.coding import Case, CodingExercise, attempt, register

FRACTIONS = (0.25, 0.5, 0.75)


def accesses() -> list[int]:
    """Block ids in the order one real step touches them (reads, then writes, op by op)."""
    from labkit.future.trace import record_trace
    from labkit.rig.data import vocab_size
    from labkit.rig.model import GPTConfig
    from labkit.rig.train import TrainConfig, Trainer

    cfg = GPTConfig(vocab_size=vocab_size(), n_layer=2, d_model=32, n_head=2, seq_len=16)
    trace = record_trace(Trainer(TrainConfig(model=cfg, batch_size=2)))
    return [b for op in trace.ops for b in (*op.reads, *op.writes)]


def belady(resident: set[int], future: list[int]) -> int:
    """The resident block used furthest in the future (or never again)."""
    nxt = {b: future.index(b) if b in future else len(future) for b in resident}
    return max(sorted(resident), key=lambda b: nxt[b])


def misses(seq: list[int], slots: int, evict: Callable[[set[int], list[int]], int]) -> int:
    """Misses of a fully associative fast tier of ``slots`` blocks under the ``evict`` policy."""
    resident: set[int] = set()
    count = 0
    for k, block in enumerate(seq):
        if block in resident:
            continue
        count += 1
        if len(resident) >= slots:
            victim = evict(set(resident), seq[k + 1:])
            if victim not in resident:
                raise ValueError(f"evict returned {victim!r}, which is not resident")
            resident.discard(victim)
        resident.add(block)
    return count


def adversarial(rounds: int = 4, late_uses: int = 12) -> list[int]:
    """Block 0 used ``late_uses`` times at the end; blocks 1 and 2 alternate ``rounds`` times before it.

    With 2 slots, MIN pushes out block 0 (its next use is furthest) and keeps 1 and 2; a policy that
    evicts the block with the fewest remaining uses keeps block 0 and misses on every access of 1 and 2.
    """
    return [0, 1, 2, *([1, 2] * rounds), *([0] * late_uses)]


REAL = ("The step's remaining accesses are in future: does your policy use them, or only what happened before?",
        "For each resident block, look up when future needs it next (or never): which of them can fast memory do "
        "without the longest?")
ADVERSARIAL = ("A block used many times later can still be the right one to push out: is it the number of remaining "
               "uses that matters, or how soon the NEXT use comes?",
               "Counting uses keeps a block that is needed often but only late, while blocks needed sooner miss: "
               "compare blocks by the position of their next use.")


def _case(name: str, seq: list[int], slots: int, fn: Callable, hints: tuple[str, ...]) -> Case:
    got, failed = attempt(name, lambda: misses(seq, slots, fn))
    if failed:
        return failed
    best = misses(seq, slots, belady)
    return Case(name, got <= best, "" if got <= best else f"{got} misses; the optimum is {best}",
                hints)


def run(fn: Callable[[set[int], list[int]], int]) -> list[Case]:
    seq = accesses()
    distinct = len(set(seq))
    cases = []
    for f in FRACTIONS:
        slots = max(2, int(f * distinct))
        cases.append(_case(f"fast tier holds {slots} of {distinct} blocks ({len(seq)} accesses, a real step)", seq,
                           slots, fn, REAL))
    for rounds in (2, 6):
        trace = adversarial(rounds)
        cases.append(_case(f"adversarial trace: block 0 used {trace.count(0) - 1} more times, but only after blocks 1 "
                           f"and 2 alternate {rounds + 1} times (2 slots)", trace, 2, fn, ADVERSARIAL))
    return cases


register(CodingExercise(
    "08.code.evict",
    "Write evict(resident, future) -> block id: which block to push out of fast memory, given the resident "
    "block ids and the step's remaining accesses in order.",
    run,
    ("The step's remaining accesses are known: use them, not the past, to pick the block fast memory misses least.",
     "Return one id out of resident."),
    "Belady's MIN: for each resident block b, its next use is future.index(b), or len(future) if it never comes "
    "back; return the block whose next use is furthest away.",
))
