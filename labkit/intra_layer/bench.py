"""Performance figures of notebook 03, printed by ``labkit bench`` (never asserted).

The 8-process runs dominate the notebook's time: their start-up and each mode's measured-vs-counted
error (target: 0) are printed here.
"""

from __future__ import annotations

import time

from labkit.intra_layer import megatron, multidim
from labkit.intra_layer.report import worst_megatron_error, worst_multidim_error


def main(quick: bool = False) -> None:
    print("\nNotebook 03: intra-layer parallelism (2 shared cores; wall-clock figures vary run to run)")
    t0 = time.perf_counter()
    results = dict(zip(("t=2", "t=2 +sp"), megatron.run_jobs([{"sp": False}, {"sp": True}], 2), strict=True))
    print(f"  Megatron 1D and SP on 2 ranks ({time.perf_counter() - t0:.1f} s): "
          f"largest error {worst_megatron_error(results):,.0f} (target: 0)")
    if quick:
        return
    t0 = time.perf_counter()
    runs = multidim.run_modes(8, [{"mode": "1d"}, {"mode": "2.5d", "depth": 2}, {"mode": "3d"}])
    print(f"  1D, 2.5D and 3D on 8 ranks ({time.perf_counter() - t0:.1f} s): "
          f"largest error {worst_multidim_error(runs):,} bytes (target: 0)")
