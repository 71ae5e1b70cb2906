"""Notebook 09's coding exercise: model-state bytes per GPU of a 3D-parallel layout with ZeRO.

The learner writes ``states_per_gpu(psi, tp, pp, dp, zero_stage)``: the bytes of 16-bit
weights, 16-bit gradients and fp32 optimizer states (2 + 2 + 12 bytes per parameter, ZeRO's
count, Rajbhandari et al. SC 2020) that one GPU holds when tensor and pipeline parallelism
split the model tp x pp ways and ZeRO stage 1, 2 or 3 further shards the optimizer states,
then the gradients, then the weights over the dp data-parallel replicas. The cases are GPT-3
175B layouts the advisor weighs in notebook 09 (Megatron-LM's example configuration among
them), compared with the advisor's own memory model (:func:`labkit.advisor.footprint.memory`),
whose ZeRO terms notebook 02 checks against real multi-process runs.
"""

from __future__ import annotations

from collections.abc import Callable

from labkit.practice.coding import Case, CodingExercise, attempt, register

LAYOUTS = ((8, 16, 8, 0), (8, 8, 16, 1), (4, 8, 32, 2), (1, 1, 1024, 3), (8, 12, 8, 3))  # tp, pp, dp, ZeRO stage


def advisor_states(tp: int, pp: int, dp: int, zero: int) -> tuple[int, float]:
    """GPT-3 175B's parameter count and the advisor's model-state bytes per GPU for this layout."""
    from labkit.advisor.costing import Layout
    from labkit.advisor.footprint import memory
    from labkit.shapes import model_shape

    shape = model_shape("gpt3-175b")
    mem = memory(shape, 2048, Layout(dp=dp, tp=tp, pp=pp, zero_stage=zero, recompute="full"), 8)
    return shape.params, mem["parameters"] + mem["gradients"] + mem["optimizer"]


def _hints(zero: int) -> tuple[str, str]:
    if zero == 0:
        return ("Without ZeRO, which parallel degrees split the 16 bytes per parameter, and which one copies them?",
                "Tensor and pipeline parallelism split every byte; data parallelism copies them.")
    divided = ("the 12 optimizer bytes", "also the 2 gradient bytes", "also the 2 weight bytes")[:zero]
    return (f"ZeRO stage {zero} shards some of the states over the dp replicas: which of the weights (2 B), gradients "
            "(2 B) and optimizer states (12 B)?", f"ZeRO stage {zero} divides by dp: " + ", ".join(divided) + ".")


def run(fn: Callable[[int, int, int, int, int], float]) -> list[Case]:
    cases = []
    for tp, pp, dp, zero in LAYOUTS:
        name = f"GPT-3 175B, tp {tp} x pp {pp} x dp {dp}, ZeRO stage {zero}"
        psi, want = advisor_states(tp, pp, dp, zero)
        got, failed = attempt(name, lambda a=(psi, tp, pp, dp, zero): float(fn(*a)))
        if failed:
            cases.append(failed)
            continue
        ok = abs(got - want) <= 1e-6 * want
        cases.append(Case(name, ok, "" if ok else f"{got / 1e9:.3f} GB; the advisor holds {want / 1e9:.3f} GB",
                          _hints(zero)))
    return cases


register(CodingExercise(
    "09.code.states_per_gpu",
    "Write states_per_gpu(psi, tp, pp, dp, zero_stage) -> bytes of weights, gradients and optimizer states one GPU "
    "holds (mixed-precision Adam, 2 + 2 + 12 bytes per parameter).",
    run,
    ("Start from 16 bytes per parameter: which parallel degrees split which of them?",
     "Return one number: bytes per GPU."),
    "psi / (tp * pp) * (w + g + o), with w = 2 / dp at stage 3 (else 2), g = 2 / dp from stage 2 (else 2) and "
    "o = 12 / dp from stage 1 (else 12): tp and pp split every byte, each ZeRO stage shards one more state over dp.",
))
