"""Notebook 01's coding exercise: bytes per category of model state, checked against real training steps.

The learner writes ``state_bytes(n_params, precision)`` returning the bytes of parameters,
gradients and optimizer states. Each case trains a real tiny GPT for one step in that
precision, measures what it holds (:func:`labkit.measure.measure_step`), and compares
category by category, so the function must describe what torch really keeps: fp32 Adam
holds two moments (8 B/param); the lab's bf16-mixed optimizer holds fp32 master weights
and two moments (12 B/param) beside 16-bit weights and gradients (ZeRO, Rajbhandari et
al. SC 2020, section 3.1).
"""

from __future__ import annotations

from collections.abc import Callable

from labkit.practice.coding import Case, CodingExercise, register, safely

CATEGORIES = ("parameters", "gradients", "optimizer")
SHAPES = ({"n_layer": 1, "d_model": 32, "n_head": 2, "seq_len": 16}, {"n_layer": 2, "d_model": 48, "n_head": 4,
                                                                       "seq_len": 16})


def measured_states(precision: str, shape: dict) -> tuple[int, dict[str, int]]:
    """Parameter count and measured bytes per category of one real step of a tiny GPT."""
    from labkit.measure import measure_step
    from labkit.rig.data import vocab_size
    from labkit.rig.model import GPTConfig
    from labkit.rig.train import TrainConfig, Trainer

    trainer = Trainer(TrainConfig(model=GPTConfig(vocab_size=vocab_size(), **shape), batch_size=2,
                                  precision=precision))  # fmt: skip
    step = measure_step(trainer)
    n = sum(p.numel() for p in trainer.model.parameters())
    return n, {k: getattr(step, k) for k in CATEGORIES}


HINTS = {"fp32": ("In fp32, how many bytes does one value take, and how many values does AdamW keep per parameter "
                  "beyond the weight and its gradient?",
                  "torch's AdamW keeps two moments per parameter (exp_avg and exp_avg_sq), each in fp32."),
         "bf16-mixed": ("The weights and gradients are 16-bit: what must the optimizer keep in fp32 so that small "
                        "updates are not rounded away?",
                        "Beside its two fp32 moments, the optimizer holds an fp32 master copy of every weight.")}


def run(fn: Callable[[int, str], dict]) -> list[Case]:
    cases = []
    for precision in ("fp32", "bf16-mixed"):
        for shape in SHAPES:
            n, real = measured_states(precision, shape)
            name = f"{precision}, {n:,} parameters (measured on a real step)"
            case = safely(name, lambda n=n, p=precision: {k: int(fn(n, p)[k]) for k in CATEGORIES}, real,
                          lambda got, want: got == want)
            cases.append(case if case.ok else Case(case.name, False, case.detail, HINTS[precision]))
    return cases


register(CodingExercise(
    "01.code.state_bytes",
    "Write state_bytes(n_params, precision) -> {'parameters': B, 'gradients': B, 'optimizer': B} for "
    "precision 'fp32' (torch AdamW) and 'bf16-mixed' (16-bit weights and gradients, fp32 master weights and moments).",
    run,
    ("Count, per parameter, the bytes of its weight, of its gradient, and of everything AdamW keeps for it.",
     "Return a dict with the three keys, each a whole number of bytes for n_params parameters."),
    "parameters = gradients = 4 n in fp32 and 2 n in bf16-mixed; optimizer = 8 n in fp32 (two fp32 moments) and "
    "12 n in bf16-mixed (an fp32 master weight and two fp32 moments).",
))
