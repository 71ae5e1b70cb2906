"""What a checkpoint costs on this machine: measured stalls beside bytes over measured bandwidths.

A synchronous save (``checkpoint.save_checkpoint``) stalls training while DCP writes the files
with fsync and the manifest hashes them (SHA-256, reading them back); an asynchronous save
(``save_checkpoint_async``) stalls only while DCP stages a copy of the state in host memory, then
writes on a thread (the idea behind CheckFreq, Mohan et al., FAST 2021). So, to first order:

* sync stall  ~ B / write bandwidth (with fsync) + B / SHA-256 throughput;
* async stall ~ B / copy bandwidth (host memory to host memory).

The three bandwidths are measured here, once, with plain tools on a buffer of their own (a file
written and fsynced in the same directory, ``hashlib``, ``torch.clone``), not fitted to the saves.
Fixed costs (creating files, DCP's planning, the manifest, the rename, fsync of the directory)
are not in the prediction: small checkpoints show them, large ones show the bandwidth. Every
figure is a wall clock: shown, never asserted.
"""

from __future__ import annotations

import hashlib
import os
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from labkit.errors import require_positive
from labkit.predict.tables import text_table
from labkit.resilience.checkpoint import measure_save_stall
from labkit.resilience.worker import micro_config
from labkit.rig.train import Trainer

PROBE_BYTES = 64 << 20


@dataclass(frozen=True)
class Bandwidths:
    """Bytes per second of this machine, each measured on a buffer of ``probe_bytes``."""

    write_fsync: float
    sha256: float
    copy: float
    probe_bytes: int


def measure_bandwidths(root: str | Path, probe_bytes: int = PROBE_BYTES, repeats: int = 3) -> Bandwidths:
    """Write + fsync a file in ``root``, hash the same bytes, clone a tensor of that size: bytes / seconds, each the
    median of ``repeats`` rounds (one round on a shared machine can land behind another process: issue 40)."""
    require_positive("probe_bytes", probe_bytes)
    require_positive("repeats", repeats)
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    data = os.urandom(probe_bytes)
    path = root / "bandwidth-probe.bin"
    src = torch.empty(probe_bytes // 4)
    rounds = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        with open(path, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        t1 = time.perf_counter()
        path.unlink()
        hashlib.sha256(data).hexdigest()
        t2 = time.perf_counter()
        src.clone()
        rounds.append((t1 - t0, t2 - t1, time.perf_counter() - t2))
    write, sha, copy = (statistics.median(r[k] for r in rounds) for k in range(3))
    return Bandwidths(probe_bytes / write, probe_bytes / sha, probe_bytes / copy, probe_bytes)


@dataclass(frozen=True)
class SaveCostRow:
    """One state size: measured stalls (seconds) beside bytes over bandwidth."""

    state_bytes: int
    disk_bytes: int
    sync_s: float
    predicted_sync_s: float
    async_stall_s: float
    predicted_async_stall_s: float
    async_total_s: float


def save_costs(root: str | Path, d_models: Sequence[int] = (32, 256, 512, 1024), repeats: int = 3,
               bandwidths: Bandwidths | None = None) -> tuple[Bandwidths, list[SaveCostRow]]:
    """Sync and async saves (median of ``repeats``) of the crash experiments' model at several widths.

    The default widths give about 0.1, 6, 25 and 100 MB of state.

    The trainers take no step, so the state is the weights (fp32) plus the random-number and data
    position entries: its size grows with d_model squared.
    """
    root = Path(root)
    bw = bandwidths or measure_bandwidths(root)
    rows = []
    for d in d_models:
        st = measure_save_stall(Trainer(micro_config(d_model=d)), root / f"cost{d}", repeats=repeats)
        b = st.state_bytes
        rows.append(SaveCostRow(b, st.disk_bytes, st.sync_s, b / bw.write_fsync + b / bw.sha256, st.async_stall_s,
                                b / bw.copy, st.async_total_s))
    return bw, rows


def save_cost_text(bw: Bandwidths, rows: Sequence[SaveCostRow]) -> str:
    """The rows in MB (1e6 B) and milliseconds, under the bandwidths they are predicted from."""
    head = (f"measured bandwidths (MB/s, on {bw.probe_bytes / 1e6:.0f} MB): write + fsync {bw.write_fsync / 1e6:.0f}, "
            f"SHA-256 {bw.sha256 / 1e6:.0f}, copy {bw.copy / 1e6:.0f}")
    table = text_table(
        ["state MB", "sync stall ms", "B/write + B/hash ms", "async stall ms", "B/copy ms", "async total ms"],
        [[f"{r.state_bytes / 1e6:.1f}", f"{1e3 * r.sync_s:.0f}", f"{1e3 * r.predicted_sync_s:.0f}",
          f"{1e3 * r.async_stall_s:.0f}", f"{1e3 * r.predicted_async_stall_s:.0f}", f"{1e3 * r.async_total_s:.0f}"]
         for r in rows])
    return head + "\n" + table
