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
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from labkit import hardware
from labkit.errors import LabkitError, require_choice, require_positive
from labkit.estimate import model_state_bytes
from labkit.references import failure_traces
from labkit.tables import text_table

DISTRIBUTIONS = ("exponential", "weibull")
TARGETS = ("storage", "peer")
SWEEP_FACTORS = (0.25, 0.35, 0.5, 0.7, 1.0, 1.4, 2.0, 2.8, 4.0)
DAY_S = 86400.0
_MAX_SEGMENTS = 200_000


def _seconds(field: str, value: float, *, zero_ok: bool = False) -> float:
    """A finite time in seconds, > 0 (or >= 0 when ``zero_ok``), else an error naming the field."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or value < 0 or (value == 0 and not zero_ok):
        raise LabkitError(f"{field} must be a finite {'non-negative' if zero_ok else 'positive'} number "
                          f"of seconds (got {value!r})")  # fmt: skip
    return float(value)


def young_interval(checkpoint_s: float, mtbf_s: float) -> float:
    """Young (CACM 1974): tau = sqrt(2*C*M), the minimum of the first-order waste C/tau + tau/(2M)."""
    return math.sqrt(2 * _seconds("checkpoint_s", checkpoint_s) * _seconds("mtbf_s", mtbf_s))


def daly_interval(checkpoint_s: float, mtbf_s: float) -> float:
    """Daly (FGCS 2006): Young's interval corrected to higher order; always <= Young's."""
    c, m = _seconds("checkpoint_s", checkpoint_s), _seconds("mtbf_s", mtbf_s)
    if c >= 2 * m:
        return m
    x = c / (2 * m)
    return math.sqrt(2 * c * m) * (1 + math.sqrt(x) / 3 + x / 9) - c


def goodput_first_order(interval_s: float, checkpoint_s: float, restart_s: float, mtbf_s: float) -> float:
    """Young's first-order model: useful fraction 1 - C/tau - (tau/2 + R)/M, clipped to [0, 1].

    Each interval pays one write C; each failure (one per M seconds) loses half an interval
    on average plus the restart R. Good while tau and R are small beside M.
    """
    tau, c = _seconds("interval_s", interval_s), _seconds("checkpoint_s", checkpoint_s)
    r, m = _seconds("restart_s", restart_s, zero_ok=True), _seconds("mtbf_s", mtbf_s)
    return min(1.0, max(0.0, 1.0 - c / tau - (tau / 2 + r) / m))


def goodput_daly(interval_s: float, checkpoint_s: float, restart_s: float, mtbf_s: float) -> float:
    """Daly's exponential model (FGCS 2006): goodput = tau / (M e^(R/M) (e^((tau+C)/M) - 1)).

    Exact for Poisson failures that may also strike during a write or a restart, so the
    simulation below must reproduce it. Always in (0, 1]: e^x - 1 >= x.
    """
    tau, c = _seconds("interval_s", interval_s), _seconds("checkpoint_s", checkpoint_s)
    r, m = _seconds("restart_s", restart_s, zero_ok=True), _seconds("mtbf_s", mtbf_s)
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
    w, tau = _seconds("work_s", work_s), _seconds("interval_s", interval_s)
    c, r = _seconds("checkpoint_s", checkpoint_s), _seconds("restart_s", restart_s, zero_ok=True)
    m = _seconds("mtbf_s", mtbf_s)
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


@dataclass(frozen=True)
class Sweep:
    """Goodput against interval: simulated beside both formulas, and where each curve peaks."""

    points: tuple[SimResult, ...]
    young_s: float
    daly_s: float

    @property
    def best_interval_s(self) -> float:
        """The interval of the sweep with the highest simulated goodput."""
        return max(self.points, key=lambda p: p.goodput).interval_s

    def table(self) -> str:
        rows = [[f"{p.interval_s:.4g}", f"{p.interval_s / self.young_s:.2f}", f"{p.goodput:.4f}",
                 f"{p.daly_goodput:.4f}",
                 f"{goodput_first_order(p.interval_s, p.checkpoint_s, p.restart_s, p.mtbf_s):.4f}",
                 f"{p.failures_per_trial:.1f}", f"{p.lost_s_per_failure:.4g}"] for p in self.points]  # fmt: skip
        heads = ["interval, s", "x Young", "simulated", "Daly", "first order", "failures/job", "lost s/failure"]
        return text_table(heads, rows)


def sweep(
    work_s: float, checkpoint_s: float, restart_s: float, mtbf_s: float, *,
    factors: Sequence[float] = SWEEP_FACTORS, **options,
) -> Sweep:  # fmt: skip
    """Simulate at ``factors`` x Young's interval, every point with the same seed (common random numbers)."""
    young = young_interval(checkpoint_s, mtbf_s)
    if not factors:
        raise LabkitError("factors must be a non-empty list of positive numbers (got [])")
    for f in factors:
        require_positive("factors", f, integer=False)
    pts = tuple(simulate(work_s, f * young, checkpoint_s, restart_s, mtbf_s, **options) for f in sorted(factors))
    return Sweep(points=pts, young_s=young, daly_s=daly_interval(checkpoint_s, mtbf_s))


def checkpoint_bytes(params: int, precision: str = "bf16-mixed") -> float:
    """Bytes a training checkpoint holds: weights + optimizer states (14 B/param in bf16-mixed).

    Gradients (2 B/param of ZeRO's 16) are recomputed in the next step, so are not saved.
    """
    states = model_state_bytes(params, precision)
    return states["parameters"] + states["optimizer"]


def target_bandwidths(target: str, name: str) -> tuple[float, float]:
    """(write, read) bytes/s of one writer: a storage drive of the catalogue, or a network link.

    ``storage``: each writer has one drive of tier ``name`` (a DGX H100 has 8 NVMe data drives
    for 8 GPUs). ``peer``: each writer sends its shard to a peer's host memory over link
    ``name``, as Gemini does (Wang et al., SOSP 2023); the catalogue's link is per direction.
    """
    require_choice("target", target, TARGETS)
    if target == "storage":
        tier = hardware.tier(name)
        return tier.write_bandwidth, tier.read_bandwidth
    link = hardware.link(name)
    return link.bandwidth, link.bandwidth


@dataclass(frozen=True)
class ClusterRow:
    """One cluster size: how often it fails, what a checkpoint costs, and the goodput that follows."""

    n_gpus: int
    mtbf_s: float
    checkpoint_s: float
    restart_s: float
    young_s: float
    daly_s: float
    goodput_young: float  # Daly's exponential model at Young's interval
    goodput_daly: float

    @property
    def failures_per_day(self) -> float:
        return DAY_S / self.mtbf_s

    @property
    def lost_gpu_hours_per_day(self) -> float:
        return (1 - self.goodput_daly) * self.n_gpus * 24


def cluster_intervals(
    sizes: Sequence[int], params: int, *, trace: str = "Llama 3", target: str = "storage",
    device: str = "NVMe-PCIe4", writers: int | None = None, restart_overhead_s: float = 600.0,
    precision: str = "bf16-mixed",
) -> tuple[ClusterRow, ...]:  # fmt: skip
    """MTBF, checkpoint cost, Young's and Daly's interval and goodput for each cluster size.

    The failure rate per GPU-day is the trace's (``labkit.references``). The checkpoint of
    ``params`` is split over ``writers`` shards (default: every GPU, as a fully sharded job
    writes; a 3D-parallel job writes once per model-parallel group, e.g. TP 8 x PP 16 = 128)
    written in parallel. R = read-back time + ``restart_overhead_s`` (rescheduling, process
    start, communicator setup): 600 s is this lab's assumption, not a published figure.
    """
    traces = {t.name: t for t in failure_traces()}
    rate = traces[require_choice("trace", trace, traces)].rate_per_gpu_day
    write_bw, read_bw = target_bandwidths(target, device)
    nbytes = checkpoint_bytes(params, precision)
    overhead = _seconds("restart_overhead_s", restart_overhead_s, zero_ok=True)
    if writers is not None:
        require_positive("writers", writers)
    if not sizes:
        raise LabkitError("sizes must be a non-empty list of GPU counts (got [])")
    rows = []
    for n in sizes:
        m = cluster_mtbf_s(rate, n)
        shards = min(n, writers or n)
        c, r = nbytes / (shards * write_bw), overhead + nbytes / (shards * read_bw)
        young, daly = young_interval(c, m), daly_interval(c, m)
        rows.append(ClusterRow(n, m, c, r, young, daly, goodput_daly(young, c, r, m), goodput_daly(daly, c, r, m)))
    return tuple(rows)


def cluster_table(rows: Sequence[ClusterRow]) -> str:
    """The rows for people: hours, minutes and percent."""
    body = [[f"{r.n_gpus:,}", f"{r.failures_per_day:.2f}", f"{r.mtbf_s / 3600:.2f}", f"{r.checkpoint_s:.1f}",
             f"{r.restart_s:.0f}", f"{r.young_s / 60:.1f}", f"{r.daly_s / 60:.1f}", f"{100 * r.goodput_daly:.1f}%",
             f"{r.lost_gpu_hours_per_day:,.0f}"] for r in rows]  # fmt: skip
    heads = ["GPUs", "failures/day", "MTBF, h", "C, s", "R, s", "Young, min", "Daly, min", "goodput", "lost GPU-h/day"]
    return text_table(heads, body)
