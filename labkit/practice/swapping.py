"""Notebook 04's coding exercise: a greedy swap planner, run through the offload simulator.

The learner writes ``choose_swaps(act_bytes, budget)``: which layer activations to move to
host memory so the ones kept on the device add up to no more than ``budget`` bytes. Each case
builds GPT-2 XL's per-layer operations (:func:`labkit.offload.iteration.transformer_ops`),
a device oversubscribed by a given factor, and runs the learner's choice through
:func:`labkit.offload.iteration.simulate_iteration` with vDNN's synchronisation (Rhu et al.,
MICRO 2016). A choice passes when the activations it keeps add up to at most ``budget`` (the
simulated device has two activations of slack for the copies in flight, so its peak alone would
let a plan overshoot the budget), the simulated peak fits the device, and it moves
no more bytes over PCIe than the greedy baseline notebook 04 sets beside SwapAdvisor's search:
keep the largest activations that still fit the budget, swap the rest. Swapping everything fits
too, but pays for every byte; swapping the largest first until the rest fits overshoots, and
so does swapping the smallest first (a knapsack: each byte kept is a byte not moved).
"""

from __future__ import annotations

from collections.abc import Callable

from labkit.practice.coding import Case, CodingExercise, attempt, register

OVERSUBSCRIPTION = (1.2, 1.6, 2.5)


def _setup(over: float):
    from labkit.hardware import gpu
    from labkit.offload.iteration import machine, transformer_ops
    from labkit.shapes import model_shape

    ops = transformer_ops(model_shape("gpt2-xl"), 1024, 4, gpu("V100-32GB").peak_flops["fp16"])
    acts = [op.act_bytes for op in ops]
    resident = 4e9
    capacity = resident + sum(acts) / over
    # vDNN's prefetch brings a swapped activation back while the op after it runs backward: two in flight
    budget = capacity - resident - 2 * max(acts)
    return ops, acts, machine("V100-32GB", resident, capacity_bytes=capacity), budget


def keep_largest_that_fit(acts: list[float], budget: float) -> list[bool]:
    """The greedy baseline: keep each activation, largest first, if it still fits ``budget``; swap the rest."""
    swap, kept = [True] * len(acts), 0.0
    for i in sorted(range(len(acts)), key=lambda k: (-acts[k], k)):
        if kept + acts[i] <= budget:
            swap[i], kept = False, kept + acts[i]
    return swap


OVER = ("Add up the activations your plan keeps on the device: is the sum at most budget?",
        "Keep a running total of what you keep and never let it pass budget; the device's slack is for the copies "
        "in flight, not for your plan.")
MOVES = ("Your plan fits but moves more bytes than it must: are you deciding what to swap, when every byte kept is a "
         "byte not moved?",
         "Fill the budget with what you KEEP; a rule that swaps in size order until the rest fits leaves budget "
         "unused.")


def _case(over: float, fn: Callable) -> Case:
    from labkit.offload.iteration import Plan, simulate_iteration

    ops, acts, m, budget = _setup(over)
    name = f"GPT-2 XL, {len(ops)} ops, device oversubscribed {over}x (simulated)"
    swap, failed = attempt(name, lambda: [bool(x) for x in fn(list(acts), budget)])
    if failed or len(swap) != len(ops):
        return failed or Case(name, False, f"return one bool per activation ({len(ops)}), got {len(swap)}")
    kept = sum(a for a, x in zip(acts, swap, strict=True) if not x)
    if kept > budget:
        return Case(name, False, f"the kept activations add up to {kept / 1e9:.3f} GB, over the {budget / 1e9:.3f} GB "
                    "budget", OVER)
    mine = simulate_iteration(ops, m, Plan(tuple(swap), (1,) * len(ops), sync=True))
    ref = simulate_iteration(ops, m, Plan(tuple(keep_largest_that_fit(acts, budget)), (1,) * len(ops), sync=True))
    if mine.peak_bytes > m.capacity_bytes:
        return Case(name, False, f"peak {mine.peak_bytes / 1e9:.2f} GB > device {m.capacity_bytes / 1e9:.2f} GB")
    if mine.bytes_moved > ref.bytes_moved * (1 + 1e-9):
        return Case(name, False, f"moves {mine.bytes_moved / 1e9:.2f} GB; the greedy baseline moves "
                    f"{ref.bytes_moved / 1e9:.2f} GB", MOVES)
    return Case(name, True)


def run(fn: Callable[[list[float], float], list[bool]]) -> list[Case]:
    return [_case(over, fn) for over in OVERSUBSCRIPTION]


register(CodingExercise(
    "04.code.choose_swaps",
    "Write choose_swaps(act_bytes, budget) -> list of bool (one per activation, True = swap it to host memory) "
    "so the activations kept on the device add up to at most budget bytes, moving as few bytes as you can.",
    run,
    ("The budget counts what stays on the device: add up the activations you keep and never let the sum pass it.",
     "Return one bool per activation, True for each you swap to host memory."),
    "go through the activations largest first; keep each one if it still fits in what is left of budget, otherwise "
    "swap it (a greedy fill of the budget, as in a knapsack).",
))
