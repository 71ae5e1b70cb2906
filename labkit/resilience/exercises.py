"""Self-check exercises of notebook 06, registered with ``labkit.teach.checks`` when imported."""

from __future__ import annotations

import math

from labkit.references import failure_traces
from labkit.resilience.cluster import checkpoint_bytes
from labkit.resilience.interval import cluster_mtbf_s, young_interval
from labkit.teach.checks import Exercise, Mistake, register

CHECKPOINT_S, MTBF_H = 60.0, 3.0
INTERVAL_MIN, RESTART_MIN = 30.0, 10.0


def _young_minutes(checkpoint_s: float = CHECKPOINT_S, mtbf_h: float = MTBF_H) -> float:
    return young_interval(checkpoint_s, mtbf_h * 3600) / 60


def _llama3_failures_per_day(n_gpus: int = 16_384) -> float:
    rate = next(t for t in failure_traces() if t.name == "Llama 3").rate_per_gpu_day
    return 86400 / cluster_mtbf_s(rate, n_gpus)


def _lost_minutes(interval_min: float = INTERVAL_MIN, restart_min: float = RESTART_MIN) -> float:
    return interval_min / 2 + restart_min


def _checkpoint_tb_70b(params: int = 70_000_000_000, bytes_per_param: float | None = None) -> float:
    return (checkpoint_bytes(params) if bytes_per_param is None else bytes_per_param * params) / 1e12


register("06.young_minutes", Exercise(
    "Young's optimal checkpoint interval, in minutes, for a 60-second checkpoint and a job MTBF of 3 hours?",
    _young_minutes,
    0.02,
    ("Young (1974) balances the time spent writing checkpoints against the work lost per failure: the interval "
     "is sqrt(2 * C * MTBF).",
     "Put both in seconds (C = 60 s, MTBF = 10,800 s), take the root, then convert to minutes."),
    lambda: f"{_young_minutes():.1f} min: checkpoint more often and the writes cost more; less often and "
            "each failure throws away more work.",
    (Mistake("the 2 in sqrt(2CM) forgotten: sqrt(C x MTBF)", lambda: _young_minutes() / math.sqrt(2)),
     Mistake("C in minutes and the MTBF in hours put in as given (sqrt(2 x 1 x 3)): convert both to one unit first",
             lambda: math.sqrt(2 * CHECKPOINT_S / 60 * MTBF_H)),
     Mistake("no square root: 2 x C x MTBF is a squared time", lambda: 2 * CHECKPOINT_S * MTBF_H * 3600 / 60)),
    unit="min",
))
register("06.failures_per_day", Exercise(
    "Expected unexpected interruptions per day for a job on 16,384 GPUs at the Llama 3 trace's rate?",
    _llama3_failures_per_day,
    0.02,
    ("The Llama 3 trace counts its unexpected interruptions over a number of days on a number of GPUs "
     "(datasets/failure_traces).",
     "419 unexpected interruptions in 54 days happened on 16,384 GPUs: divide the count by the days."),
    lambda: f"{_llama3_failures_per_day():.2f} per day: one every {24 / _llama3_failures_per_day():.1f} hours.",
    (Mistake("all 419 interruptions of the 54 days: divide by the days",
             lambda: _llama3_failures_per_day() * 54),
     Mistake("the hours between failures, not the failures per day", lambda: 24 / _llama3_failures_per_day()),
     Mistake("also divided by the 16,384 GPUs: that is the rate per GPU-day, not the job's",
             lambda: _llama3_failures_per_day() / 16_384)),
    unit="/day",
))
register("06.lost_minutes", Exercise(
    "Minutes lost per failure, on average, with a checkpoint every 30 minutes and a 10-minute restart?",
    _lost_minutes,
    0.02,
    ("Two things are lost at a failure: the work done since the last checkpoint, and the restart.",
     "A failure strikes, on average, halfway through an interval; then the job restarts."),
    "25 min: half an interval of recomputed work plus the restart (first order, Young 1974).",
    (Mistake("a whole interval lost: on average a failure strikes halfway through it",
             lambda: INTERVAL_MIN + RESTART_MIN),
     Mistake("the restart forgotten: the job also waits for it", lambda: INTERVAL_MIN / 2)),
    unit="min",
))
register("06.checkpoint_tb", Exercise(
    "TB (1e12 bytes) in a checkpoint of a 70-billion-parameter model trained with bf16 mixed-precision Adam?",
    _checkpoint_tb_70b,
    0.02,
    ("A checkpoint holds what a restarted job cannot recompute: which of the 16 bytes per parameter is that?",
     "Weights (2 bytes) and optimizer states (fp32 master weights and two moments, 12 bytes); gradients are "
     "recomputed, so not saved."),
    lambda: f"{_checkpoint_tb_70b():.2f} TB: 14 bytes per parameter.",
    (Mistake("all 16 bytes per parameter: the gradients are recomputed after a restart, not saved",
             lambda: _checkpoint_tb_70b(bytes_per_param=16)),
     Mistake("the 16-bit weights only: the optimizer states must be saved too, or Adam restarts cold",
             lambda: _checkpoint_tb_70b(bytes_per_param=2))),
    unit="TB",
))
