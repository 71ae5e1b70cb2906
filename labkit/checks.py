"""Self-check exercises: each answer is checked against labkit's own model, never a stored number.

An exercise has a question, a function that computes the right answer from the
lab's formulas and data, a relative tolerance, a hint for a wrong answer and an
explanation for a right one. ``check(key, answer)`` prints the feedback and
returns whether it was right, so a notebook cell stays one line.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from labkit.errors import require_choice
from labkit.estimate import PRECISIONS, activation_bytes_per_layer, model_state_bytes


@dataclass(frozen=True)
class Exercise:
    question: str
    answer: Callable[[], float]
    rel_tol: float
    hint: str
    why: str


def _smallest_zero_stage(params: float = 7.5e9, dp: int = 64, budget_gb: float = 20.0) -> int:
    for stage in range(4):
        if sum(model_state_bytes(int(params), "bf16-mixed", stage, dp).values()) < budget_gb * 1e9:
            return stage
    return -1


def _gpt3_layer_gb() -> float:
    from labkit.shapes import model_shape

    return activation_bytes_per_layer(model_shape("gpt3-175b"), 2048, 1) / 1e9


def _llama3_failures_per_day() -> float:
    from labkit.references import failure_traces

    trace = next(t for t in failure_traces() if "llama" in t.name.lower())
    return trace.failures_per_day(16384)


EXERCISES: dict[str, Exercise] = {
    "01.bytes_per_param": Exercise(
        "How many bytes per parameter does mixed-precision Adam hold (weights, gradients, optimizer)?",
        lambda: float(sum(vars(PRECISIONS["bf16-mixed"]).values()) - PRECISIONS["bf16-mixed"].activation),
        0.0,
        "Add 16-bit weights, 16-bit gradients, and K for fp32 master weights, momentum and variance.",
        "2 + 2 + 12: the optimizer, not the model, holds most of the bytes (ZeRO, SC 2020).",
    ),
    "01.gpt3_layer_gb": Exercise(
        "GB (1e9 bytes) of activations ONE GPT-3 175B layer keeps at s=2048, b=1, 16-bit, no parallelism?",
        _gpt3_layer_gb,
        0.02,
        "Use s*b*h*(34 + 5*a*s/h) with h=12288, a=96; then divide by 1e9.",
        "The 5as/h term is 40 here, bigger than the 34: the attention scores dominate at long sequences.",
    ),
    "01.zero_stage": Exercise(
        "Smallest ZeRO stage that puts a 7.5B-parameter model's states under 20 GB per GPU with Nd=64?",
        _smallest_zero_stage,
        0.0,
        "Compare 4*Psi + 12*Psi/Nd, 2*Psi + 14*Psi/Nd and 16*Psi/Nd with 20e9.",
        "Stage 1 still keeps 16-bit weights and gradients everywhere (31.4 GB); stage 2 gets to 16.6 GB.",
    ),
    "01.failures_per_day": Exercise(
        "At Llama 3's failure rate, how many unexpected interruptions per day on 16,384 GPUs?",
        _llama3_failures_per_day,
        0.05,
        "The rate per GPU-day is 419 / (54 * 16384); multiply by the GPU count.",
        "About one every three hours: a 16k-GPU job must expect to restart several times a day.",
    ),
}


def check(key: str, answer: float | None) -> bool:
    """Print feedback on ``answer`` to exercise ``key``; True when it is right."""
    require_choice("exercise", key, EXERCISES)
    ex = EXERCISES[key]
    if answer is None:
        print(f"Not answered yet. {ex.question}\nHint: {ex.hint}")
        return False
    try:
        value = float(answer)
    except (TypeError, ValueError):
        print(f"The answer must be a number (got {answer!r}). Hint: {ex.hint}")
        return False
    right = ex.answer()
    ok = abs(value - right) <= ex.rel_tol * abs(right) + 1e-12
    if ok:
        print(f"Right: {right:.4g}. {ex.why}")
    else:
        direction = "high" if value > right else "low"
        print(f"Not quite: {value:.4g} is too {direction}. Hint: {ex.hint}")
    return ok


def reveal(prediction: str | None, measured: dict[str, float], question: str = "largest category") -> bool:
    """Compare a committed guess of the largest entry of ``measured`` with the measurement."""
    largest = max(measured, key=measured.get)
    share = measured[largest] / sum(measured.values())
    if prediction is None:
        print(f"No prediction committed. The {question} is {largest} ({100 * share:.0f}%).")
        return False
    require_choice("prediction", prediction, measured)
    verdict = "Right" if prediction == largest else f"Not this time: you said {prediction}"
    print(f"{verdict}. The {question} is {largest}, {100 * share:.0f}% of the total.")
    return prediction == largest


def reveal_claims(guesses: dict[str, bool | None], truths: dict[str, bool]) -> int:
    """Compare yes/no guesses with what the model says; returns how many were right."""
    right = 0
    for key, truth in truths.items():
        guess = guesses.get(key)
        said = "no guess" if guess is None else ("you said yes" if guess else "you said no")
        right += guess is truth
        print(f"{key}: {'yes' if truth else 'no'} ({said})")
    return right
