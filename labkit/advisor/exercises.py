"""Self-check exercises of notebook 09, registered with ``labkit.teach.checks`` when imported.

Every answer is computed by the advisor's models on the capstone's task (GPT-3 175B, 1,024
A100-80GB, global batch 1,536, seq 2,048), never stored.
"""

from __future__ import annotations

from labkit.advisor import capstone, costing, search
from labkit.advisor.costing import Layout
from labkit.shapes import model_shape
from labkit.teach.checks import Exercise, register

TASK = capstone.GPT3_TASK
# Megatron-LM's example configuration (examples/pretrain_gpt3_175B.sh): 128 nodes x 8 GPUs, tp 8, pp 16.
MEGATRON = Layout(dp=8, tp=8, pp=16, micro_batch=1, zero_stage=0, recompute="full")


def _judge(lay: Layout) -> costing.Plan:
    mc = costing.machine(TASK.gpu, TASK.gpus)
    return search.evaluate(model_shape(TASK.model), TASK.seq, TASK.global_batch, lay, mc)


def _pure_dp_gb() -> float:
    return _judge(Layout(dp=1024, tp=1, pp=1)).memory_bytes / 1e9


def _megatron_gb() -> float:
    return _judge(MEGATRON).memory_bytes / 1e9


def _megatron_bubble_share() -> float:
    p = _judge(MEGATRON)
    return p.times["bubble"] / p.step_s


def _best_step_s() -> float:
    return capstone.best_plan(TASK).step_s


register("09.pure_dp_gb", Exercise(
    "GB (1e9 bytes) per GPU that pure data parallelism (dp=1024, no ZeRO, no recompute) needs for GPT-3 175B "
    "at micro-batch 1, seq 2048?",
    _pure_dp_gb,
    0.02,
    "Every GPU keeps all 16 bytes per parameter of model states plus one micro-batch's activations of 96 layers.",
    lambda: f"{_pure_dp_gb():,.0f} GB against 80: no amount of data parallelism alone helps, since it divides "
    "the batch, not the model.",
))
register("09.megatron_gb", Exercise(
    "GB per GPU of Megatron-LM's example configuration (tp 8, pp 16, dp 8, micro-batch 1, full recompute, "
    "no ZeRO)?",
    _megatron_gb,
    0.05,
    "States: 16 bytes x 175e9 / (8 x 16); activations: 1F1B holds p = 16 micro-batches of 6 layers, each "
    "keeping 2sbh/t bytes under full recompute with sequence parallelism.",
    lambda: f"{_megatron_gb():.1f} GB: most of it is the model states; full recompute leaves the activations small.",
))
register("09.megatron_bubble", Exercise(
    "What fraction (0..1) of a step does that configuration spend in the pipeline bubble?",
    _megatron_bubble_share,
    0.05,
    "The bubble adds (p-1)/m of the compute time; divide it by the whole step, compute + bubble + communication.",
    lambda: f"{100 * _megatron_bubble_share():.1f}%: with 192 micro-batches per pipeline the 15 idle slots are cheap.",
))
register("09.best_step_s", Exercise(
    "Seconds per step of the advisor's fastest plan for the capstone's task (run labkit.advisor.advise)?",
    _best_step_s,
    0.02,
    "advise('gpt3-175b', 1536, 'A100-80GB', 1024, 'fastest', seq=2048).best.step_s",
    lambda: f"{_best_step_s():.2f} s: {capstone.best_plan(TASK).layout.label}.",
))
