"""Performance figures of notebook 02, printed by ``labkit bench`` (never asserted).

* start-up of a local process group (the fixed cost of every distributed cell);
* the largest measured-vs-predicted error of ZeRO's bytes and traffic (target: 0);
* the pipeline bubble measured, replayed from the measured durations and by formula
  (``bubble``), on a model large enough that compute, not messaging, dominates a stage.
"""

from __future__ import annotations

import time

from labkit import dist
from labkit.inter_layer import bubble, zero
from labkit.inter_layer.report import worst_zero_error


def main(quick: bool = False) -> None:
    print("\nNotebook 02: inter-layer parallelism (2 shared cores; wall-clock figures vary run to run)")
    for world in (2, 4):
        t0 = time.perf_counter()
        dist.run(dist.all_reduce_demo, world)
        print(f"  process group of {world}: {time.perf_counter() - t0:5.1f} s from spawn to results")
    t0 = time.perf_counter()
    results = zero.run_strategies(world_size=2, steps=3)
    print(f"  ZeRO bytes and traffic, 4 strategies on 2 ranks ({time.perf_counter() - t0:.1f} s): "
          f"largest error {worst_zero_error(results):,.0f} (target: 0)")
    results = bubble.measure(2, bubble.CASES[: 2 if quick else len(bubble.CASES)], repeats=1 if quick else 3)
    print("  " + bubble.table(results).replace("\n", "\n  "))
