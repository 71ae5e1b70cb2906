"""Notebook 08's coding exercise: an eviction policy, replayed on a real training step's trace.

The learner writes ``evict(resident, future)``: given the block ids now in fast memory and
the rest of the step's accesses in order, return the block to push out. The cases record
one real step of the tiny GPT (:func:`labkit.future.trace.record_trace`: every weight and
saved activation a forward or backward op touches), replay its access sequence through
a fast tier of a few sizes, and count misses. A policy passes when it misses no more
than Belady's MIN (evict the block whose next use is furthest away; Belady, IBM Systems
Journal 1966), which is optimal when the future is known, as it is for a training step
that repeats: what notebook 08's trace-aware schedule exploits. LRU misses more.
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


def run(fn: Callable[[set[int], list[int]], int]) -> list[Case]:
    seq = accesses()
    distinct = len(set(seq))
    cases = []
    for f in FRACTIONS:
        slots = max(2, int(f * distinct))
        name = f"fast tier holds {slots} of {distinct} blocks ({len(seq)} accesses, a real step)"
        got, failed = attempt(name, lambda slots=slots: misses(seq, slots, fn))
        if failed:
            cases.append(failed)
            continue
        best = misses(seq, slots, belady)
        cases.append(Case(name, got <= best, "" if got <= best else f"{got} misses; the optimum is {best}"))
    return cases


register(CodingExercise(
    "08.code.evict",
    "Write evict(resident, future) -> block id: which block to push out of fast memory, given the resident "
    "block ids and the step's remaining accesses in order.",
    run,
    "The step's future is known: push out the block whose next use is furthest away (or that is never used again).",
))
