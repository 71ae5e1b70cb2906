"""Measured beside simulated: the real vDNN micro-run replayed in the simulator of THIS machine.

``labkit.offload.vdnn`` offloads the tiny GPT's saved activations for real (to a DRAM
pool and to files); ``labkit.offload.iteration`` predicts offload for real GPUs. This
module checks the second against the first on the one machine where both can run:

1. measure this machine: host-to-host memcpy bandwidth (the "link" a CPU-only vDNN
   crosses) and the fixed cost of a clone of each storage vDNN moves; the raw disk
   (``disk.measure_disk``, ``O_DIRECT``) and the fixed cost of one file through the store
   vDNN uses; the compute seconds of each layer of a plain step, forward and backward
   (module hooks at the layer boundaries, median of ``repeats`` steps);
2. build a ``Machine`` from those figures (copy and file costs as the link's and the
   disk's latency), one op per saved storage of the first iteration's trace, and the
   plan vDNN runs: every storage swapped, the next forward waiting for its copy (vDNN
   copies in the forward thread), prefetched one op ahead (its two reads in flight);
3. run the real offloaded step and the simulated one and put bytes, added seconds and
   peak resident bytes side by side (:class:`Row`).

Bytes must agree exactly: both count every saved storage once out and once back.
Seconds and peaks are figures to look at, not to assert. The replay moves each storage as
vDNN does (one op per storage, a layer's measured seconds shared among its storages by
bytes: only layer boundaries are timed), with a fixed cost per copy and per file measured
apart from the run. What that replay leaves out is vDNN's own software cost (the saved-tensor
hooks, the bookkeeping, the hand-off to the prefetch thread, which on a shared machine
competes with compute for the cores): ``overhead.software_cost`` measures it with copies that
move no bytes, and a second replay adds it, shared equally among the offloaded tensors, to
their forward and backward (``Row.calibrated_added_s``). Wall-clock figures vary run to run;
a notebook shows them marked as ignored.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

import torch

from labkit.errors import require_choice, require_positive
from labkit.hardware import Link, Tier, tier
from labkit.offload.budget import model_state_bytes
from labkit.offload.disk.bandwidth import DiskBandwidth, measure_disk
from labkit.offload.disk.io import MiB
from labkit.offload.disk.store import DiskStore
from labkit.offload.iteration import Machine, Op, Plan, Result, simulate_iteration
from labkit.offload.overhead import SoftwareCost, software_cost, timed_step
from labkit.offload.trace import Trace, trace_step
from labkit.offload.vdnn import Offloader
from labkit.rig.data import vocab_size
from labkit.rig.model import GPTConfig
from labkit.rig.train import TrainConfig, Trainer, seed_everything

STORES = ("dram", "disk")
AHEAD = 1  # the simulator's prefetch distance for vdnn's default lookahead of 2 reads in flight
MODEL = {"seq_len": 32, "n_layer": 2, "n_head": 4, "d_model": 64}


@dataclass(frozen=True)
class Row:
    """One store: what the real run moved, added and held, beside the simulator's prediction."""

    store: str
    measured_bytes: int  # written + read back, per step
    simulated_bytes: float  # the plan's bytes out and back
    measured_added_s: float  # offloaded step - plain step (median of paired differences)
    simulated_added_s: float  # simulated step - compute-only step
    measured_peak_bytes: int  # model states + saved activations on the budgeted device
    simulated_peak_bytes: float
    calibrated_added_s: float = 0.0  # simulated, with the measured software cost as a term of each op
    measured_added_range_s: tuple[float, float] = (0.0, 0.0)  # lowest and highest paired difference
    pairs: int = 0  # paired differences behind the median


@dataclass(frozen=True)
class Calibration:
    """The measured machine, the ops replayed, and one :class:`Row` per store."""

    copy_bps: float  # host-to-host clone bandwidth: the simulator's host link
    copy_s: float  # fixed seconds per clone: the link's latency
    disk: DiskBandwidth  # raw, O_DIRECT
    file_s: float  # fixed seconds per offload file: the disk's latency
    states_bytes: int  # model states, resident throughout (16 bytes per parameter)
    ops: tuple[Op, ...]
    rows: tuple[Row, ...]
    software: SoftwareCost | None = None  # the offloader's own cost, measured with no bytes moved

    def table(self) -> list[dict[str, float | str]]:
        """Rows for a notebook: bytes, seconds (ms) and peaks (bytes), measured beside simulated."""
        return [{"store": r.store, "bytes measured": r.measured_bytes, "bytes simulated": r.simulated_bytes,
                 "added ms measured": 1e3 * r.measured_added_s, "added ms simulated": 1e3 * r.simulated_added_s,
                 "added ms simulated + software": 1e3 * r.calibrated_added_s,
                 "peak B measured": r.measured_peak_bytes, "peak B simulated": r.simulated_peak_bytes}
                for r in self.rows]


def _group(module: str) -> str:
    """The op a saved storage belongs to: its transformer layer, or the embedding, or the head (loss included)."""
    parts = module.split(".")
    if parts[0] == "h" and len(parts) > 1:
        return f"h.{parts[1]}"
    return "embed" if parts[0] in ("wte", "wpe", "drop") else "head"


def op_bytes(trace: Trace) -> dict[str, int]:
    """Bytes each op saves for backward, in forward order (every storage of the trace counted once)."""
    out: dict[str, int] = {}
    for e in trace.entries:
        out[_group(e.module)] = out.get(_group(e.module), 0) + e.nbytes
    return out


def storage_ops(trace: Trace, per_op: dict[str, tuple[float, float]]) -> list[Op]:
    """One op per saved storage, in forward order, as vDNN moves them; a layer's seconds shared by bytes.

    The split of a layer's measured time among its storages is the model's assumption (only layer
    boundaries are timed). A layer that saves nothing stays one op of 0 bytes, so its time is kept.
    """
    sizes = op_bytes(trace)
    ops = []
    for name, (f, b) in per_op.items():
        mine = [e for e in trace.entries if _group(e.module) == name]
        if not mine:
            ops.append(Op(name, f, b, 0.0))
        for e in mine:
            share = e.nbytes / sizes[name]
            ops.append(Op(f"{name}#{e.index}", f * share, b * share, float(e.nbytes)))
    return ops


def with_software(ops: list[Op], cost: SoftwareCost) -> list[Op]:
    """``ops`` with the measured software cost shared equally among the ops that save bytes (one per tensor)."""
    n = sum(o.act_bytes > 0 for o in ops) or 1
    f, b = cost.forward_s / n, cost.backward_s / n
    return [replace(o, fwd_s=o.fwd_s + f, bwd_s=o.bwd_s + b) if o.act_bytes > 0 else o for o in ops]


def _median_time(fn: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def copy_cost(sizes: list[int], repeats: int = 5) -> tuple[float, float]:
    """(bytes per second, seconds per copy) of host-to-host clones, as vDNN's DRAM store makes them.

    The bandwidth is a 16 MiB memcpy's into memory already mapped; the fixed cost per copy is what cloning
    buffers of ``sizes`` (the storages vDNN moves, each into a new buffer) takes beyond their bytes at that
    bandwidth. Medians of ``repeats``.
    """
    src, dst = torch.ones(16 * MiB, dtype=torch.uint8), torch.zeros(16 * MiB, dtype=torch.uint8)
    bw = src.numel() / _median_time(lambda: dst.copy_(src), repeats)
    bufs = [torch.ones(n, dtype=torch.uint8) for n in sizes]
    keep: list[torch.Tensor] = []

    def run() -> None:
        keep.clear()
        keep.extend(b.clone() for b in bufs)

    run()
    return bw, max(0.0, (_median_time(run, repeats) - sum(sizes) / bw) / len(sizes))


def file_cost(sizes: list[int], disk: DiskBandwidth, directory: str | None = None) -> float:
    """Seconds per file beyond its bytes at the raw disk bandwidth, through the store vDNN uses.

    vDNN's disk store (``disk.DiskStore``, ``O_DIRECT`` where allowed) writes one file per storage, so
    for small storages the cost per file, not the bandwidth, sets the time. Measured by writing files of
    ``sizes`` bytes, then reading and removing each; the store removes its directory afterwards.
    """
    data = [torch.ones(n, dtype=torch.uint8) for n in sizes]
    with DiskStore(directory) as store:
        t0 = time.perf_counter()
        for k, d in enumerate(data):
            store.write(str(k), d)
        t1 = time.perf_counter()
        for k in range(len(data)):
            store.read(str(k))
            store.remove(str(k))
        t2 = time.perf_counter()
    extra = (t1 - t0 - sum(sizes) / disk.write_bps) + (t2 - t1 - sum(sizes) / disk.read_bps)
    return max(0.0, extra / (2 * len(sizes)))


def layer_times(trainer: Trainer, repeats: int = 3) -> dict[str, tuple[float, float]]:
    """Median forward and backward seconds of each op (embed, h.0 ..., head) of a plain step.

    Cut at module hooks: forward at each layer's and the final norm's forward pre-hook; backward at each
    layer's backward pre-hook and at the end of the first layer's backward. Each op's time is the median
    over ``repeats`` steps after one warm-up step.
    """
    blocks = list(trainer.model.h)
    names = ["embed", *(f"h.{i}" for i in range(len(blocks))), "head"]
    fwd_marks: list[float] = []
    bwd_marks: list[float] = []
    hooks = [b.register_forward_pre_hook(lambda *_: fwd_marks.append(time.perf_counter())) for b in blocks]
    hooks.append(trainer.model.ln_f.register_forward_pre_hook(lambda *_: fwd_marks.append(time.perf_counter())))
    hooks += [b.register_full_backward_pre_hook(lambda *_: bwd_marks.append(time.perf_counter())) for b in blocks]
    hooks.append(blocks[0].register_full_backward_hook(lambda *_: bwd_marks.append(time.perf_counter())))
    samples: list[tuple[list[float], list[float]]] = []
    try:
        for i in range(repeats + 1):  # the first step warms up and is dropped
            fwd_marks.clear()
            bwd_marks.clear()
            x, y = trainer.data(i)
            t0 = time.perf_counter()
            _, loss = trainer.model(x, y)
            t1 = time.perf_counter()
            loss.backward()
            t2 = time.perf_counter()
            trainer.model.zero_grad(set_to_none=True)
            if i:
                samples.append(([t0, *fwd_marks, t1], [t1, *bwd_marks, t2]))
    finally:
        for h in hooks:
            h.remove()
    out = {}
    n = len(names)  # embed, h.0 .. h.{L-1}, head: forward cuts in order, backward cuts in reverse
    for k, name in enumerate(names):
        f = statistics.median(s[0][k + 1] - s[0][k] for s in samples)
        b = statistics.median(s[1][n - k] - s[1][n - k - 1] for s in samples)
        out[name] = (f, b)
    return out


def _measured(trainer: Trainer, trace: Trace, store: str, root: str | None,
              repeats: int) -> tuple[int, float, tuple[float, float], int]:
    """(bytes out and back per step, median seconds an offloaded forward + backward adds, the lowest and highest
    paired difference, peak resident bytes).

    Plain and offloaded steps alternate, each pair on the same batch and weights, and the added seconds are
    the median of the pairs' differences (a slow spell of a shared machine then hits both terms of a pair).
    A spell that hits one term only makes that pair's difference too large or negative: the range says how
    far the pairs spread, so a reader can tell a busy machine's figure from a quiet one's. The offloader is
    entered for its step only; the first pair warms up and is dropped.
    """
    diffs, moved, peak = [], 0, 0
    for i in range(repeats + 1):
        plain = sum(timed_step(trainer, i, None))
        with Offloader(trainer.model, store, trace=trace, root=root) as off:
            offloaded = sum(timed_step(trainer, i, off))
            moved, peak = off.stats.bytes_written + off.stats.bytes_read, max(peak, off.peak)
        if i:
            diffs.append(offloaded - plain)
    return moved, statistics.median(diffs), (min(diffs), max(diffs)), peak


def calibrate(stores: tuple[str, ...] = STORES, repeats: int = 3, root: str | None = None,
              disk_bytes: int = 16 * MiB, model: dict | None = None) -> Calibration:
    """Run the real vDNN micro-run and its replay in the simulator of this machine (2-5 s on an idle laptop).

    One trainer serves the trace, the plain timing and every offloaded run (steps 0 .. ``repeats``, no
    optimizer step in between, so every run sees the same weights and batches).
    """
    for s in stores:
        require_choice("store", s, STORES)
    require_positive("repeats", repeats)
    seed_everything(0)
    trainer = Trainer(TrainConfig(GPTConfig(vocab_size=vocab_size(), **(model or MODEL)), batch_size=4))
    trace = trace_step(trainer, 0)
    sizes = op_bytes(trace)
    per_op = layer_times(trainer, repeats)
    plain_s = sum(f + b for f, b in per_op.values())
    ops = storage_ops(trace, per_op)
    nbytes = [e.nbytes for e in trace.entries]
    copy_bps, copy_s = copy_cost(nbytes, repeats=max(5, repeats))
    disk = measure_disk(root or tempfile.gettempdir(), disk_bytes, block=min(disk_bytes, 4 * MiB))
    file_s = file_cost(nbytes, disk, root)
    states = model_state_bytes(trainer.model)
    link = Link("memcpy (measured)", (), "pcie", copy_bps, copy_s, "measured by labkit.offload.calibrate")
    ssd: Tier = replace(tier("NVMe-PCIe4"), name="this disk (measured)", read_bandwidth=disk.read_bps,
                        write_bandwidth=disk.write_bps, latency_s=file_s, source=disk.summary())
    m = Machine(float(states + sum(sizes.values())), float(states), link, ssd)
    sw = software_cost(trainer, trace, max(5, repeats))
    rows = []
    for store in stores:
        swap = tuple(o.act_bytes > 0 for o in ops)
        plan = Plan(swap, (AHEAD,) * len(ops), "host" if store == "dram" else "disk", "direct", True)
        sim: Result = simulate_iteration(ops, m, plan)
        cal = simulate_iteration(with_software(ops, sw), m, plan)
        moved, added_s, spread, peak = _measured(trainer, trace, store, root, repeats)
        rows.append(Row(store, moved, sim.bytes_moved, added_s, sim.time_s - plain_s, peak,
                        sim.peak_bytes, cal.time_s - plain_s, spread, repeats))
    return Calibration(copy_bps, copy_s, disk, file_s, states, tuple(ops), tuple(rows), sw)
