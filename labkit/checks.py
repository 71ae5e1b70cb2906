"""Self-check exercises: each answer is checked against labkit's own model, never a stored number.

An exercise has a question, a function that computes the right answer from the
lab's formulas and data, a relative tolerance, a hint for a wrong answer and an
explanation for a right one. ``check(key, answer)`` returns ``Feedback``,
which a notebook shows as the cell's result and a test reads as a bool.
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
    why: str | Callable[[], str]  # a callable computes its figures with labkit, when it is shown


def _smallest_zero_stage(params: float = 7.5e9, dp: int = 64, budget_gb: float = 20.0) -> int:
    for stage in range(4):
        if sum(model_state_bytes(int(params), "bf16-mixed", stage, dp).values()) < budget_gb * 1e9:
            return stage
    return -1


def _gpt3_layer_gb() -> float:
    from labkit.shapes import model_shape

    return activation_bytes_per_layer(model_shape("gpt3-175b"), 2048, 1) / 1e9


def _llama3_mtbf_hours(n_gpus: int = 4096) -> float:
    from labkit.references import failure_traces

    trace = next(t for t in failure_traces() if t.name == "Llama 3")
    return trace.mtbf_hours(n_gpus)


def _bubble_p8_m32() -> float:
    from labkit.sim import bubble_fraction

    return bubble_fraction(8, 32)


def _states_gb(params: float, stage: int, dp: int) -> float:
    return sum(model_state_bytes(int(params), "bf16-mixed", stage, dp).values()) / 1e9


def _zero3_gb_per_gpu() -> float:
    return _states_gb(70e9, 3, 64)


def _pipedream_versions_first_stage(p: int = 4) -> float:
    from labkit.sim import peak_in_flight, schedule

    return float(peak_in_flight(schedule("1f1b", p, 4 * p)[0]))


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
        lambda: f"The 5as/h term is {5 * 96 * 2048 / 12288:.0f} here, more than twice the 34: "
        "the attention scores dominate at long sequences.",
    ),
    "01.zero_stage": Exercise(
        "Smallest ZeRO stage that puts a 7.5B-parameter model's states under 20 GB per GPU with Nd=64?",
        _smallest_zero_stage,
        0.0,
        "Compare 4*Psi + 12*Psi/Nd, 2*Psi + 14*Psi/Nd and 16*Psi/Nd with 20e9.",
        lambda: "Stage 1 still keeps 16-bit weights and gradients everywhere "
        f"({_states_gb(7.5e9, 1, 64):.1f} GB); stage 2 gets to {_states_gb(7.5e9, 2, 64):.1f} GB.",
    ),
    "02.bubble": Exercise(
        "What fraction of a 1F1B step is bubble with p = 8 stages and m = 32 micro-batches (a number in 0..1)?",
        _bubble_p8_m32,
        0.01,
        "The bubble is (p-1)/(m+p-1) of the total time, whatever the schedule keeps in memory.",
        lambda: f"7/39 = {100 * _bubble_p8_m32():.0f}%: to get it down to 5% you need m = 19(p-1) = 133 "
        "micro-batches, or interleaving.",
    ),
    "02.zero3_gb": Exercise(
        "GB per GPU of model states for a 70B model with mixed-precision Adam under ZeRO-3 on 64 GPUs?",
        _zero3_gb_per_gpu,
        0.02,
        "Stage 3 divides all 16 bytes per parameter by Nd: 16 * 70e9 / 64, then divide by 1e9.",
        lambda: f"{_zero3_gb_per_gpu():.1f} GB: it fits an 80 GB GPU with room for activations; "
        f"without ZeRO it is {_states_gb(70e9, 0, 64):,.0f} GB.",
    ),
    "02.pipedream_versions": Exercise(
        "How many weight versions does PipeDream stash at the FIRST of 4 pipeline stages in its steady state?",
        _pipedream_versions_first_stage,
        0.0,
        "One version per mini-batch whose forward has run and backward has not: how many are in flight at stage 0?",
        "p = 4: the first stage starts p forwards before its first backward, so it keeps p versions.",
    ),
    "01.mtbf_hours": Exercise(
        "At Llama 3's failure rate, how many hours pass between failures of a job on 4,096 GPUs?",
        _llama3_mtbf_hours,
        0.05,
        "Llama 3 saw 419 unexpected interruptions in 54 days on 16,384 GPUs; the rate scales with the GPU count.",
        "About half a day: a checkpoint written once a day would lose hours of work at every failure.",
    ),
}


@dataclass(frozen=True)
class Feedback:
    """What a learner reads after answering: truthy when right, shown as its message.

    Returned (not printed), so a notebook cell that ends with ``check(...)`` shows
    the message as the cell's result, and a test can assert on ``bool(feedback)``.
    """

    ok: bool
    message: str

    def __bool__(self) -> bool:
        return self.ok

    def __str__(self) -> str:
        return self.message

    def _repr_pretty_(self, p, cycle) -> None:
        p.text(self.message)


def register(key: str, exercise: Exercise) -> None:
    """Add a topic's exercise: topic modules sit above this one, so they register themselves here."""
    EXERCISES[key] = exercise


def check(key: str, answer: float | None) -> Feedback:
    """Feedback on ``answer`` to exercise ``key``: right (with why) or a hint."""
    require_choice("exercise", key, EXERCISES)
    ex = EXERCISES[key]
    if answer is None:
        return Feedback(False, f"Not answered yet. {ex.question}\nHint: {ex.hint}")
    try:
        value = float(answer)
    except (TypeError, ValueError):
        return Feedback(False, f"The answer must be a number (got {answer!r}). Hint: {ex.hint}")
    right = ex.answer()
    if abs(value - right) <= ex.rel_tol * abs(right) + 1e-12:
        why = ex.why() if callable(ex.why) else ex.why
        return Feedback(True, f"Right: {right:.4g}. {why}")
    direction = "high" if value > right else "low"
    return Feedback(False, f"Not quite: {value:.4g} is too {direction}. Hint: {ex.hint}")


def reveal(prediction: str | None, measured: dict[str, float], question: str = "largest category") -> Feedback:
    """Compare a committed guess of the largest entry of ``measured`` with the measurement."""
    largest = max(measured, key=measured.get)
    share = measured[largest] / sum(measured.values())
    if prediction is None:
        return Feedback(False, f"No prediction committed. The {question} is {largest} ({100 * share:.0f}%).")
    require_choice("prediction", prediction, measured)
    verdict = "Right" if prediction == largest else f"Not this time: you said {prediction}"
    return Feedback(prediction == largest, f"{verdict}. The {question} is {largest}, {100 * share:.0f}% of the total.")


def reveal_number(guess: float | None, actual: float, what: str, unit: str = "GB", scale: float = 1e9) -> Feedback:
    """Compare a committed numeric guess with the value labkit measured or computed.

    Right means within a factor of 1.5 either way: the point is the order of
    magnitude and the reasoning, not the third digit.
    """
    value = actual / scale

    def shown(x: float) -> str:
        if unit:
            return f"{x:,.1f} {unit}"
        return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.3g}"

    if guess is None:
        return Feedback(False, f"No guess committed. {what}: {shown(value)}.")
    try:
        g = float(guess)
    except (TypeError, ValueError):
        return Feedback(False, f"The guess must be a number (got {guess!r}). {what}: {shown(value)}.")
    ok = g == 0 if value == 0 else (g > 0 and 1 / 1.5 <= g / value <= 1.5)
    verdict = "Close" if ok else ("Too high" if g > value else "Too low")
    return Feedback(ok, f"{verdict}: you said {shown(g)}. {what}: {shown(value)}.")


def reveal_claims(guesses: dict[str, bool | None], truths: dict[str, bool]) -> Feedback:
    """Compare yes/no guesses with what the model says; right when every guess is."""
    lines, right = [], 0
    for key, truth in truths.items():
        guess = guesses.get(key)
        said = "no guess" if guess is None else ("you said yes" if guess else "you said no")
        right += guess is truth
        lines.append(f"{key}: {'yes' if truth else 'no'} ({said})")
    lines.append(f"{right} of {len(truths)} right.")
    return Feedback(right == len(truths), "\n".join(lines))
