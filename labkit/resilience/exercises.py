"""Self-check exercises of notebook 06, registered with ``labkit.teach.checks`` when imported."""

from __future__ import annotations

from labkit.references import failure_traces
from labkit.resilience.cluster import checkpoint_bytes
from labkit.resilience.interval import cluster_mtbf_s, young_interval
from labkit.teach.checks import Exercise, register


def _young_minutes(checkpoint_s: float = 60.0, mtbf_h: float = 3.0) -> float:
    return young_interval(checkpoint_s, mtbf_h * 3600) / 60


def _llama3_failures_per_day(n_gpus: int = 16_384) -> float:
    rate = next(t for t in failure_traces() if t.name == "Llama 3").rate_per_gpu_day
    return 86400 / cluster_mtbf_s(rate, n_gpus)


def _lost_minutes(interval_min: float = 30.0, restart_min: float = 10.0) -> float:
    return interval_min / 2 + restart_min


def _checkpoint_tb_70b(params: int = 70_000_000_000) -> float:
    return checkpoint_bytes(params) / 1e12


register("06.young_minutes", Exercise(
    "Young's optimal checkpoint interval, in minutes, for a 60-second checkpoint and a job MTBF of 3 hours?",
    _young_minutes,
    0.02,
    "sqrt(2 * C * MTBF), with both in seconds.",
    lambda: f"{_young_minutes():.1f} min: checkpoint more often and the writes cost more; less often and "
            "each failure throws away more work.",
))
register("06.failures_per_day", Exercise(
    "Expected unexpected interruptions per day for a job on 16,384 GPUs at the Llama 3 trace's rate?",
    _llama3_failures_per_day,
    0.03,
    "419 unexpected interruptions in 54 days happened on 16,384 GPUs: divide.",
    lambda: f"{_llama3_failures_per_day():.2f} per day: one every {24 / _llama3_failures_per_day():.1f} hours.",
))
register("06.lost_minutes", Exercise(
    "Minutes lost per failure, on average, with a checkpoint every 30 minutes and a 10-minute restart?",
    _lost_minutes,
    0.02,
    "A failure strikes, on average, halfway through an interval; then the job restarts.",
    "25 min: half an interval of recomputed work plus the restart (first order, Young 1974).",
))
register("06.checkpoint_tb", Exercise(
    "TB (1e12 bytes) in a checkpoint of a 70-billion-parameter model trained with bf16 mixed-precision Adam?",
    _checkpoint_tb_70b,
    0.02,
    "Weights (2 bytes) and optimizer states (fp32 master weights and two moments, 12 bytes); gradients are "
    "recomputed, so not saved.",
    lambda: f"{_checkpoint_tb_70b():.2f} TB: 14 bytes per parameter.",
))
