"""Checkpoint-restart at cluster scale: how often a job fails, what its checkpoint costs, the goodput.

The failure rate per GPU-day is a published trace's (``labkit.references``); failures of
independent GPUs add, so a job on n GPUs fails n times as often. The checkpoint's cost is its
bytes over the bandwidth of the writers (Young 1974 and Daly 2006 for the interval and the
goodput, ``interval``). A checkpoint written to a node's own NVMe drive is fast, but it does
not survive the loss of that node: restarting after a node failure needs a copy elsewhere
(a peer's memory, as Gemini keeps, or remote storage), whose bandwidth sets the real cost.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from labkit import hardware
from labkit.errors import LabkitError, require_choice, require_positive
from labkit.predict.estimate import model_state_bytes
from labkit.predict.tables import text_table
from labkit.references import failure_traces
from labkit.resilience.interval import (
    DAY_S,
    cluster_mtbf_s,
    daly_interval,
    goodput_daly,
    require_seconds,
    young_interval,
)

TARGETS = ("storage", "peer")


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
    ``params`` is split over ``writers`` shards written in parallel (default: every GPU, as a
    fully sharded job writes). A 3D-parallel job's data-parallel replicas hold the same state,
    so one replica writes it: the ranks of one model-parallel group, e.g. TP 8 x PP 16 = one
    group of 128 ranks, each writing its own shard. R = read-back time + ``restart_overhead_s`` (rescheduling, process
    start, communicator setup): 600 s is this lab's assumption, not a published figure.
    """
    traces = {t.name: t for t in failure_traces()}
    rate = traces[require_choice("trace", trace, traces)].rate_per_gpu_day
    write_bw, read_bw = target_bandwidths(target, device)
    nbytes = checkpoint_bytes(params, precision)
    overhead = require_seconds("restart_overhead_s", restart_overhead_s, zero_ok=True)
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
