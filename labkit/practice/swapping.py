"""Notebook 04's coding exercise: a greedy swap planner, run through the offload simulator.

The learner writes ``choose_swaps(act_bytes, budget)``: which layer activations to move to
host memory so the ones kept on the device add up to no more than ``budget`` bytes. Each case
builds GPT-2 XL's per-layer operations (:func:`labkit.offload.iteration.transformer_ops`),
a device oversubscribed by a given factor, and runs the learner's choice through
:func:`labkit.offload.iteration.simulate_iteration` with vDNN's synchronisation (Rhu et al.,
MICRO 2016). A choice passes when the simulated peak fits the device and it moves no more
bytes over PCIe than the largest-first rule, the greedy baseline notebook 04 sets beside
SwapAdvisor's search: swapping everything fits too, but pays for every byte.
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
    budget = capacity - resident - max(acts)  # one activation in flight while it is copied out
    return ops, acts, machine("V100-32GB", resident, capacity_bytes=capacity), budget


def largest_first(acts: list[float], budget: float) -> list[bool]:
    """Swap the largest activations until the rest fit ``budget``."""
    swap, kept = [False] * len(acts), sum(acts)
    for i in sorted(range(len(acts)), key=lambda k: (-acts[k], k)):
        if kept <= budget:
            break
        swap[i], kept = True, kept - acts[i]
    return swap


def run(fn: Callable[[list[float], float], list[bool]]) -> list[Case]:
    from labkit.offload.iteration import Plan, simulate_iteration

    cases = []
    for over in OVERSUBSCRIPTION:
        ops, acts, m, budget = _setup(over)
        name = f"GPT-2 XL, {len(ops)} ops, device oversubscribed {over}x (simulated)"
        swap, failed = attempt(name, lambda acts=acts, budget=budget: [bool(x) for x in fn(list(acts), budget)])
        if failed or len(swap) != len(ops):
            cases.append(failed or Case(name, False, f"return one bool per activation ({len(ops)}), got {len(swap)}"))
            continue
        mine = simulate_iteration(ops, m, Plan(tuple(swap), (1,) * len(ops), sync=True))
        ref = simulate_iteration(ops, m, Plan(tuple(largest_first(acts, budget)), (1,) * len(ops), sync=True))
        fits = mine.peak_bytes <= m.capacity_bytes
        lean = mine.bytes_moved <= ref.bytes_moved * (1 + 1e-9)
        detail = "" if fits and lean else (
            f"peak {mine.peak_bytes / 1e9:.2f} GB > device {m.capacity_bytes / 1e9:.2f} GB" if not fits else
            f"moves {mine.bytes_moved / 1e9:.2f} GB; largest-first moves {ref.bytes_moved / 1e9:.2f} GB")
        cases.append(Case(name, fits and lean, detail))
    return cases


register(CodingExercise(
    "04.code.choose_swaps",
    "Write choose_swaps(act_bytes, budget) -> list of bool (one per activation, True = swap it to host memory) "
    "so the activations kept on the device add up to at most budget bytes, moving as few bytes as you can.",
    run,
    "Swapping a large activation frees the most for one copy: sort by size, largest first, and stop as soon as the "
    "rest fits.",
))
