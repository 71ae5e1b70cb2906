"""Self-check exercises of notebook 09, registered with ``labkit.teach.checks`` when imported.

Every answer is computed by the advisor's models on the capstone's task (GPT-3 175B, 1,024
A100-80GB, global batch 1,536, seq 2,048), never stored.
"""

from __future__ import annotations

from dataclasses import replace

from labkit.advisor import capstone, costing, search
from labkit.advisor.costing import Layout
from labkit.shapes import model_shape
from labkit.teach.checks import Exercise, Mistake, register

TASK = capstone.GPT3_TASK
# Megatron-LM's example configuration (examples/pretrain_gpt3_175B.sh): 128 nodes x 8 GPUs, tp 8, pp 16.
MEGATRON = Layout(dp=8, tp=8, pp=16, micro_batch=1, zero_stage=0, recompute="full")


def _judge(lay: Layout) -> costing.Plan:
    mc = costing.machine(TASK.gpu, TASK.gpus)
    return search.evaluate(model_shape(TASK.model), TASK.seq, TASK.global_batch, lay, mc)


def _pure_dp_gb(zero_stage: int = 0) -> float:
    return _judge(Layout(dp=1024, tp=1, pp=1, zero_stage=zero_stage)).memory_bytes / 1e9


def _states_gb(tp: int, pp: int) -> float:
    """Mixed-precision Adam's 16 bytes per parameter, split over the tensor- and pipeline-parallel GPUs."""
    return 16 * model_shape(TASK.model).params / (tp * pp) / 1e9


def _megatron_gb(recompute: str = "full") -> float:
    return _judge(replace(MEGATRON, recompute=recompute)).memory_bytes / 1e9


def _megatron_bubble_share(of: str = "step") -> float:
    p = _judge(MEGATRON)
    t = p.times
    return t["bubble"] / {"step": p.step_s, "compute": t["compute"], "schedule": t["compute"] + t["bubble"]}[of]


def _ideal_bubble() -> float:
    from labkit.sim import bubble_fraction

    return bubble_fraction(MEGATRON.pp, TASK.global_batch // (MEGATRON.dp * MEGATRON.micro_batch))


def _best_step_s() -> float:
    return capstone.best_plan(TASK).step_s


register("09.pure_dp_gb", Exercise(
    "GB (1e9 bytes) per GPU that pure data parallelism (dp=1024, no ZeRO, no recompute) needs for GPT-3 175B "
    "at micro-batch 1, seq 2048?",
    _pure_dp_gb,
    0.02,
    ("Data parallelism splits the batch, not the model: what does every GPU keep whole?",
     "Every GPU keeps all 16 bytes per parameter of model states plus one micro-batch's activations of 96 layers."),
    lambda: f"{_pure_dp_gb():,.0f} GB against 80: no amount of data parallelism alone helps, since it divides "
    "the batch, not the model.",
    (Mistake("the model states alone: one micro-batch's activations of 96 layers come on top",
             lambda: _states_gb(1, 1)),
     Mistake("the states divided over the 1,024 GPUs: that is ZeRO-3, not plain data parallelism",
             lambda: _pure_dp_gb(zero_stage=3))),
    unit="GB",
))
register("09.megatron_gb", Exercise(
    "GB per GPU of Megatron-LM's example configuration (tp 8, pp 16, dp 8, micro-batch 1, full recompute, "
    "no ZeRO)?",
    _megatron_gb,
    0.02,
    ("Model states are split over tensor and pipeline parallelism (t x p = 128 GPUs), not over data parallelism.",
     "States: 16 bytes x 175e9 / (8 x 16); activations: 1F1B holds p = 16 micro-batches of 6 layers, each "
     "keeping 2sbh/t bytes under full recompute with sequence parallelism."),
    lambda: f"{_megatron_gb():.1f} GB: most of it is the model states; full recompute leaves the activations small.",
    (Mistake("the activations kept whole: the configuration recomputes each layer (full recompute)",
             lambda: _megatron_gb("none")),
     Mistake("the states split over tensor parallelism only: each of the 16 pipeline stages holds its own layers",
             lambda: _megatron_gb() - _states_gb(8, 16) + _states_gb(8, 1)),
     Mistake("the states divided over all 1,024 GPUs: without ZeRO the 8 data-parallel replicas each hold them",
             lambda: _megatron_gb() - _states_gb(8, 16) + _states_gb(8, 16) / 8)),
    unit="GB",
))
register("09.megatron_bubble", Exercise(
    "By the advisor's step-time model (compute, pipeline bubble, communication, optimizer), what fraction (0..1) of "
    "that configuration's step is the pipeline bubble?",
    _megatron_bubble_share,
    0.005,  # the ideal (p-1)/(m+p-1) is 1% away: it leaves out the communication
    ("The bubble adds (p-1)/m of the compute time, with m the micro-batches one pipeline runs.",
     "Divide the bubble's seconds by the whole step: compute + bubble + communication + optimizer "
     "(labkit.advisor.search.evaluate's times)."),
    lambda: f"{100 * _megatron_bubble_share():.1f}%: with 192 micro-batches per pipeline the 15 idle slots are cheap.",
    (Mistake("the bubble's share of compute plus bubble: the communication and the optimizer are part of the step",
             lambda: _megatron_bubble_share("schedule")),
     Mistake("(p-1)/(m+p-1) = 15/207, the schedule's ideal share: the advisor's step also counts communication",
             _ideal_bubble),
     Mistake("(p-1)/m: the bubble over the compute time, not its share of the whole step",
             lambda: _megatron_bubble_share("compute"))),
    unit="fraction",
))
register("09.best_step_s", Exercise(
    "Seconds per step of the advisor's fastest plan for the capstone's task (run labkit.advisor.advise)?",
    _best_step_s,
    0.02,
    ("The advisor searches every layout of the capstone's cluster and ranks them by step time: ask it for the "
     "fastest.",
     "advise('gpt3-175b', 1536, 'A100-80GB', 1024, 'fastest', seq=2048).best.step_s"),
    lambda: f"{_best_step_s():.2f} s: {capstone.best_plan(TASK).layout.label}.",
    (Mistake("Megatron-LM's example layout's step: the advisor finds a faster one", lambda: _judge(MEGATRON).step_s),
     Mistake("the best plan's compute alone: its step also holds the bubble and the communication",
             lambda: capstone.best_plan(TASK).times["compute"])),
    unit="s",
))
