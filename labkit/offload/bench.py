"""Performance figures of notebook 04, printed by ``labkit bench`` (never asserted).

* the raw sequential bandwidth of the offload disk (``O_DIRECT``, one 8 MiB request at a
  time), measured in the same run as the streaming it is compared with;
* ZeRO-Infinity's streaming bandwidth on a model large enough that disk I/O, not compute,
  dominates a step: reads (prefetch), writes (background write-back), each over the time
  that direction had a request in flight, and their ratio to raw. Target: at least 70%
  (Rajbhandari et al. 2021 claim the offload path uses most of the drive's bandwidth);
* the combined ratio: the seconds the raw disk would need for all of a step's reads and
  writes, over the seconds the disk was busy with any of them. Reads and writes overlap,
  so each direction shares the disk with the other and the per-direction ratios
  undercount; the combined ratio charges every busy second once.

The disk is measured again after the run: a shared or virtual disk varies between the two,
and the spread says how far the ratios can be trusted.
"""

from __future__ import annotations

import tempfile
import time

from labkit.data import vocab_size
from labkit.model import GPTConfig
from labkit.offload.disk import GiB, MiB, measure_disk
from labkit.offload.zero_infinity import run_zero_infinity
from labkit.train import TrainConfig

TARGET_RATIO = 0.70
STREAM_MODEL = {"n_layer": 8, "n_head": 8, "d_model": 512, "seq_len": 64, "dropout": 0.1}
QUICK_MODEL = {**STREAM_MODEL, "n_layer": 4}


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x:4.0%}"


def main(quick: bool = False) -> None:
    print("\nNotebook 04: heterogeneous offload, ZeRO-Infinity on a real disk (bandwidths vary run to run)")
    model = QUICK_MODEL if quick else STREAM_MODEL
    cfg = TrainConfig(GPTConfig(vocab_size=vocab_size(), **model), batch_size=4, precision="bf16-mixed")
    root = tempfile.gettempdir()
    steps = 2 if quick else 3
    t0 = time.perf_counter()
    run = run_zero_infinity(cfg, steps, root=root, measure_raw_bytes=(64 if quick else 256) * MiB)
    after = measure_disk(root, (64 if quick else 256) * MiB)
    print(f"  raw disk before the run: {run.raw.summary() if run.raw else 'not measured'}")
    print(f"  raw disk after the run:  {after.summary()}")
    print(f"  model: {run.params / 1e6:.1f}M parameters ({model['n_layer']} layers, d_model {model['d_model']}), "
          f"{steps} steps in {run.seconds:.1f} s ({time.perf_counter() - t0:.1f} s with set-up and raw measurements)")
    print(f"  per step: read {run.bytes_read[0] / MiB:.0f} MiB, write {run.bytes_written[0] / MiB:.0f} MiB "
          f"(predicted {run.predicted['read'] / MiB:.0f} / {run.predicted['write'] / MiB:.0f} MiB), {run.method}")
    print(f"  streaming read  {run.achieved_read_bps / GiB:.2f} GiB/s = {_pct(run.read_ratio)} of raw "
          f"(target >= {TARGET_RATIO:.0%})")
    print(f"  streaming write {run.achieved_write_bps / GiB:.2f} GiB/s = {_pct(run.write_ratio)} of raw "
          f"(target >= {TARGET_RATIO:.0%}; overlaps the reads)")
    if run.raw:
        mean_r, mean_w = (run.raw.read_bps + after.read_bps) / 2, (run.raw.write_bps + after.write_bps) / 2
        print(f"  against the mean of both raw measurements: read {_pct(run.achieved_read_bps / mean_r)}, "
              f"write {_pct(run.achieved_write_bps / mean_w)}")
    print(f"  combined: disk busy {run.io_busy_seconds:.2f} s for what raw needs "
          f"{(run.combined_ratio or 0) * run.io_busy_seconds:.2f} s = {_pct(run.combined_ratio)} "
          f"(target >= {TARGET_RATIO:.0%})")
