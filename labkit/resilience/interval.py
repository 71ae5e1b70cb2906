"""How often to checkpoint: Young's and Daly's interval beside a Monte Carlo of a failing job.

Checkpointing often wastes time writing; checkpointing rarely wastes the work done since
the last checkpoint when a failure strikes. The formulas (all in seconds):

* Young, "A first order approximation to the optimum checkpoint interval", CACM 17(9), 1974:
  waste = C/tau + (tau/2 + R)/M, minimised at tau = sqrt(2*C*M).
* Daly, "A higher order estimate of the optimum checkpoint interval for restart dumps",
  FGCS 22, 2006: with exponential failures (failures also during writes and restarts) the
  wall time per unit of work is T = M*e^(R/M)*(e^((tau+C)/M) - 1)/tau, and
  tau = sqrt(2CM)*(1 + sqrt(C/2M)/3 + (C/2M)/9) - C for C < 2M, else M.

:func:`simulate` draws failures (exponential, or Weibull with shape < 1: Schroeder and Gibson,
"A large-scale study of failures in high-performance computing systems", DSN 2006, found times
between failures fit a Weibull with decreasing hazard, shape 0.7-0.8) and walks the job event by
event, so the formula can be checked against a measurement. :func:`cluster_intervals` turns the
published failure traces (``labkit.references``) and a checkpoint's size and bandwidth into a table.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from labkit.errors import LabkitError, require_choice, require_positive

DISTRIBUTIONS = ("exponential", "weibull")
DAY_S = 86400.0
_MAX_SEGMENTS = 200_000


def require_seconds(field: str, value: float, *, zero_ok: bool = False) -> float:
    """A finite time in seconds, > 0 (or >= 0 when ``zero_ok``), else an error naming the field."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or value < 0 or (value == 0 and not zero_ok):
        raise LabkitError(f"{field} must be a finite {'non-negative' if zero_ok else 'positive'} number "
                          f"of seconds (got {value!r})")  # fmt: skip
    return float(value)


def young_interval(checkpoint_s: float, mtbf_s: float) -> float:
    """Young (CACM 1974): tau = sqrt(2*C*M), the minimum of the first-order waste C/tau + tau/(2M)."""
    return math.sqrt(2 * require_seconds("checkpoint_s", checkpoint_s) * require_seconds("mtbf_s", mtbf_s))


def daly_interval(checkpoint_s: float, mtbf_s: float) -> float:
    """Daly (FGCS 2006): Young's interval corrected to higher order; always <= Young's."""
    c, m = require_seconds("checkpoint_s", checkpoint_s), require_seconds("mtbf_s", mtbf_s)
    if c >= 2 * m:
        return m
    x = c / (2 * m)
    return math.sqrt(2 * c * m) * (1 + math.sqrt(x) / 3 + x / 9) - c


def goodput_first_order(interval_s: float, checkpoint_s: float, restart_s: float, mtbf_s: float) -> float:
    """Young's first-order model: useful fraction 1 - C/tau - (tau/2 + R)/M, clipped to [0, 1].

    Each interval pays one write C; each failure (one per M seconds) loses half an interval
    on average plus the restart R. Good while tau and R are small beside M.
    """
    tau, c = require_seconds("interval_s", interval_s), require_seconds("checkpoint_s", checkpoint_s)
    r, m = require_seconds("restart_s", restart_s, zero_ok=True), require_seconds("mtbf_s", mtbf_s)
    return min(1.0, max(0.0, 1.0 - c / tau - (tau / 2 + r) / m))


def goodput_daly(interval_s: float, checkpoint_s: float, restart_s: float, mtbf_s: float) -> float:
    """Daly's exponential model (FGCS 2006): goodput = tau / (M e^(R/M) (e^((tau+C)/M) - 1)).

    Exact for Poisson failures that may also strike during a write or a restart, so the
    simulation below must reproduce it. Always in (0, 1]: e^x - 1 >= x.
    """
    tau, c = require_seconds("interval_s", interval_s), require_seconds("checkpoint_s", checkpoint_s)
    r, m = require_seconds("restart_s", restart_s, zero_ok=True), require_seconds("mtbf_s", mtbf_s)
    exponent = (tau + c + r) / m
    if exponent > 700:
        return 0.0
    return tau / (m * math.exp(r / m) * math.expm1((tau + c) / m))


def cluster_mtbf_s(rate_per_gpu_day: float, n_gpus: int) -> float:
    """MTBF of a job on ``n_gpus``: independent failures add, so the job fails n times as often."""
    require_positive("rate_per_gpu_day", rate_per_gpu_day, integer=False)
    require_positive("n_gpus", n_gpus)
    return DAY_S / (rate_per_gpu_day * n_gpus)


@dataclass(frozen=True)
class SimResult:
    """One simulated interval: goodput and where the lost time went, over ``trials`` seeded jobs."""

    interval_s: float
    checkpoint_s: float
    restart_s: float
    mtbf_s: float
    distribution: str
    trials: int
    goodput: float  # total work / total wall time over all trials
    goodput_std: float  # spread of one job's goodput
    failures_per_trial: float
    lost_work_s_per_failure: float  # computation (and partial writes) redone after a failure
    restart_s_per_failure: float  # time spent restarting, failed restarts included
    daly_goodput: float  # the analytic prediction, for the exponential case

    @property
    def lost_s_per_failure(self) -> float:
        return self.lost_work_s_per_failure + self.restart_s_per_failure


def _draw(rng: np.random.Generator, n: int, mtbf_s: float, distribution: str, shape: float) -> np.ndarray:
    if distribution == "exponential":
        return rng.exponential(mtbf_s, n)
    return mtbf_s / math.gamma(1 + 1 / shape) * rng.weibull(shape, n)  # scale so the mean is mtbf_s


def simulate(
    work_s: float, interval_s: float, checkpoint_s: float, restart_s: float, mtbf_s: float, *,
    distribution: str = "exponential", shape: float = 0.7, trials: int = 200, seed: int = 0,
) -> SimResult:  # fmt: skip
    """Run ``trials`` jobs of ``work_s`` seconds of work, event by event, all trials in step.

    A job computes ``interval_s``, then stalls ``checkpoint_s`` to write (the last piece
    too). Failures form a renewal process in wall time: the gaps between them are drawn
    i.i.d. with mean ``mtbf_s`` and may strike during a write or a restart. A failure loses
    everything since the last finished write and costs ``restart_s`` (restarted again if
    hit). Seeded numpy Generator: the same arguments give the same result on every run.
    """
    w, tau = require_seconds("work_s", work_s), require_seconds("interval_s", interval_s)
    c, r = require_seconds("checkpoint_s", checkpoint_s), require_seconds("restart_s", restart_s, zero_ok=True)
    m = require_seconds("mtbf_s", mtbf_s)
    require_choice("distribution", distribution, DISTRIBUTIONS)
    require_positive("shape", shape, integer=False)
    require_positive("trials", trials)
    if w / tau > _MAX_SEGMENTS:
        raise LabkitError(f"work_s / interval_s must be at most {_MAX_SEGMENTS} intervals (got {w / tau:.0f})")
    predicted = goodput_daly(tau, c, r, m)
    if predicted < 1e-3:
        raise LabkitError(f"mtbf_s={m:g} is too short for interval_s={tau:g}, checkpoint_s={c:g}, "
                          f"restart_s={r:g}: expected goodput {predicted:.1e}, the job would never finish")  # fmt: skip
    rng = np.random.default_rng(seed)
    n_seg = max(1, math.ceil(w / tau - 1e-9))
    last = w - (n_seg - 1) * tau
    t, done = np.zeros(trials), np.zeros(trials, dtype=np.int64)
    next_fail = _draw(rng, trials, m, distribution, shape)
    restarting = np.zeros(trials, dtype=bool)
    failures, lost_work, restart_time = np.zeros(trials), np.zeros(trials), np.zeros(trials)
    active = np.ones(trials, dtype=bool)
    while active.any():
        run, rst = active & ~restarting, active & restarting
        seg = np.where(done < n_seg - 1, tau, last)
        end = np.where(rst, t + r, t + seg + c)
        ok, hit = active & (next_fail >= end), active & (next_fail < end)
        done += run & ok
        lost_work += np.where(run & hit, next_fail - t, 0.0)
        restart_time += np.where(rst, np.minimum(next_fail, end) - t, 0.0)
        t = np.where(ok, end, np.where(hit, next_fail, t))
        restarting = np.where(hit, True, np.where(rst & ok, False, restarting))
        failures += hit
        next_fail[hit] = t[hit] + _draw(rng, int(hit.sum()), m, distribution, shape)
        active = done < n_seg
    per_trial = w / t
    n_fail = max(failures.sum(), 1.0)
    return SimResult(
        interval_s=tau, checkpoint_s=c, restart_s=r, mtbf_s=m, distribution=distribution, trials=trials,
        goodput=float(w * trials / t.sum()), goodput_std=float(per_trial.std()),
        failures_per_trial=float(failures.mean()), lost_work_s_per_failure=float(lost_work.sum() / n_fail),
        restart_s_per_failure=float(restart_time.sum() / n_fail), daly_goodput=predicted,
    )  # fmt: skip
