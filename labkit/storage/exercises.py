"""Notebook 01's self-check exercises, each with its likely mistakes named.

Importing this module registers them with :mod:`labkit.teach.checks` (notebook 01 does).
"""

from __future__ import annotations

from labkit.predict.estimate import PRECISIONS, activation_bytes_per_layer, model_state_bytes
from labkit.teach.checks import EXERCISES, Exercise, Mistake


def _smallest_zero_stage(params: float = 7.5e9, dp: int = 64, budget_gb: float = 20.0) -> int:
    for stage in range(4):
        if sum(model_state_bytes(int(params), "bf16-mixed", stage, dp).values()) < budget_gb * 1e9:
            return stage
    return -1


def _gpt3_layer_gb() -> float:
    from labkit.shapes import model_shape

    return activation_bytes_per_layer(model_shape("gpt3-175b"), 2048, 1) / 1e9


def _attention_share(seq: int = 2048) -> float:
    """The 5as/h term's share of Korthikanti et al.'s 34 + 5as/h, for GPT-3 175B."""
    from labkit.shapes import model_shape

    g = model_shape("gpt3-175b")
    attn = 5 * g.heads * seq / g.hidden
    return attn / (34 + attn)


def _llama3_mtbf_hours(n_gpus: int = 4096) -> float:
    return _trace().mtbf_hours(n_gpus)


def _states_gb(params: float, stage: int, dp: int) -> float:
    return sum(model_state_bytes(int(params), "bf16-mixed", stage, dp).values()) / 1e9


def _trace(name: str = "Llama 3"):
    from labkit.references import failure_traces

    return next(t for t in failure_traces() if t.name == name)


_STORAGE: dict[str, Exercise] = {
    "01.bytes_per_param": Exercise(
        "Under ZeRO's convention, how many bytes per parameter does mixed-precision Adam hold (weights, gradients, "
        "optimizer)?",
        lambda: float(sum(vars(PRECISIONS["bf16-mixed"]).values()) - PRECISIONS["bf16-mixed"].activation),
        0.0,
        ("List what each parameter carries: a 16-bit weight, a 16-bit gradient, and what Adam keeps in fp32.",
         "Adam in mixed precision keeps an fp32 master copy of the weight and two fp32 moments: 3 x 4 bytes."),
        "2 + 2 + 12: the optimizer, not the model, holds most of the bytes (ZeRO, SC 2020).",
        (Mistake("the gradients left out (2 + 12)", lambda: 14.0),
         Mistake("12: the fp32 master weights left out (2 + 2 + 8), or one Adam moment (2 + 2 + 4 + 4); Adam keeps "
                 "an fp32 copy and two moments", lambda: 12.0),
         Mistake("DeepSpeed's convention with fp32 gradients (2 + 4 + 12): ZeRO's paper counts 16-bit ones",
                 lambda: 18.0),
         Mistake("only the 16-bit weights and gradients (2 + 2)", lambda: 4.0)),
        unit="B",
    ),
    "01.gpt3_layer_gb": Exercise(
        "GB (1e9 bytes) of activations ONE GPT-3 175B layer keeps at s=2048, b=1, 16-bit, no parallelism?",
        _gpt3_layer_gb,
        0.02,
        ("Korthikanti et al. (2022) count a layer's activations as s*b*h*(34 + 5*a*s/h) bytes in 16-bit: the 34 "
         "covers the linear layers, LayerNorms and dropout masks, the 5as/h the attention scores.",
         "GPT-3 175B has h = 12288 and a = 96, so 5*a*s/h = 80: the layer keeps s*b*h*114 bytes; divide by 1e9."),
        lambda: f"The 5as/h term is {5 * 96 * 2048 / 12288:.0f} here, more than twice the 34: "
        "the attention scores dominate at long sequences.",
        (Mistake("the attention term 5as/h forgotten: s*b*h*34 counts the linear layers only",
                 lambda: _gpt3_layer_gb() * (1 - _attention_share())),
         Mistake("only the attention term 5as/h: the 34 of the linear layers, LayerNorms and dropout left out",
                 lambda: _gpt3_layer_gb() * _attention_share()),
         Mistake("a 4-byte (fp32) count: the formula's 34 and 5 already hold 16-bit bytes",
                 lambda: 2 * _gpt3_layer_gb())),
        unit="GB",
    ),
    "01.zero_stage": Exercise(
        "Smallest ZeRO stage that puts a 7.5 bn-parameter model's states under 20 GB per GPU with N_d = 64?",
        _smallest_zero_stage,
        0.0,
        ("Compare 4*Psi + 12*Psi/Nd (stage 1), 2*Psi + 14*Psi/Nd (stage 2) and 16*Psi/Nd (stage 3) with 20e9.",
         "With Psi = 7.5e9 and Nd = 64: stage 1 is about 31.4 GB, stage 2 about 16.6 GB."),
        lambda: "Stage 1 still keeps 16-bit weights and gradients everywhere "
        f"({_states_gb(7.5e9, 1, 64):.1f} GB); stage 2 gets to {_states_gb(7.5e9, 2, 64):.1f} GB.",
        (Mistake("stage 1: sharding the optimizer states alone leaves the 16-bit weights and gradients whole on every "
                 "GPU, over 20 GB", lambda: 1.0),
         Mistake("stage 3 also fits, but stage 2 already does: the question asks for the smallest", lambda: 3.0),
         Mistake("stage 0 (plain data parallelism): every GPU keeps all 16 bytes per parameter", lambda: 0.0)),
    ),
    "01.mtbf_hours": Exercise(
        "At Llama 3's failure rate, how many hours pass between failures of a job on 4,096 GPUs?",
        _llama3_mtbf_hours,
        0.02,
        ("Llama 3 saw 419 unexpected interruptions in 54 days on 16,384 GPUs: first find the time between failures "
         "on 16,384 GPUs.",
         "Failures come from each GPU independently: a quarter of the GPUs fails a quarter as often, so the time "
         "between failures is 4 times longer."),
        "About half a day: a checkpoint written once a day would lose hours of work at every failure.",
        (Mistake("the time between failures on all 16,384 GPUs, not scaled to 4,096",
                 lambda: _trace().mtbf_hours(16_384)),
         Mistake("scaled the wrong way: fewer GPUs fail less often, so the time between failures grows",
                 lambda: _trace().mtbf_hours(16_384) / 4)),
        unit="h",
    ),
}

EXERCISES.update(_STORAGE)
