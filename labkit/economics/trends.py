"""What notebook 07's text claims of its tables, each True or False: the notebook asserts them (issue 40).

Every figure of 07 at scale is labkit's model (catalogue prices, powers and grids, the measured bytes per
parameter), so these claims hold on any machine and under any load; none is wall clock.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from labkit.economics.published import Beside
from labkit.economics.run import RunCost, winners

A_LITTLE = 0.10  # "energy and carbon go up a little with offload": under 10%


def large_batch(runs: Mapping[str, RunCost]) -> dict[str, bool]:
    """Section 4: nothing waits, so the same GPU-hours and the same rent; offload costs a little more energy and
    carbon and writes flash; compute dominates the energy, HBM traffic a small share, DRAM and SSD smaller."""
    hbm = runs["hbm"]
    offload = [r for s, r in runs.items() if s != "hbm"]
    gpu_hours = [r.gpus * r.time_s for r in runs.values()]
    shares = [{p: j / r.energy.total_j for p, j in r.energy.parts_j.items()} for r in runs.values()]
    cheapest = set(winners(dict(runs))["cloud_usd"])
    return {"every strategy rents for the same dollars (within 0.5%)": cheapest == set(runs),
            "the same GPU-hours: offload trades GPUs for days": max(gpu_hours) <= min(gpu_hours) * 1.005,
            f"offload's energy and carbon above all in HBM's, by under {100 * A_LITTLE:.0f}%":
                all(hbm.facility_kwh <= r.facility_kwh < (1 + A_LITTLE) * hbm.facility_kwh and
                    hbm.kg_co2 <= r.kg_co2 < (1 + A_LITTLE) * hbm.kg_co2 for r in offload),
            "only SSD offload writes flash": [s for s, r in runs.items() if r.ssd_life_used > 0] == ["ssd-offload"],
            "compute over half of every strategy's energy; HBM traffic under 5%, DRAM and SSD below HBM":
                all(s["compute"] > 0.5 and s["hbm"] < 0.05 and max(s["dram"], s["ssd"]) < s["hbm"] for s in shares)}


def small_batch(small: Mapping[str, RunCost]) -> dict[str, bool]:
    """Sections 5 and 7: with a small batch the SSD run takes longer, rents for more and emits more than all in
    HBM, and the drives it wears carry more embodied carbon than its operating carbon."""
    ssd, hbm = small["ssd-offload"], small["hbm"]
    return {"SSD offload takes longer, rents for more and emits more":
                ssd.time_s > hbm.time_s and ssd.cloud_usd > hbm.cloud_usd and ssd.kg_co2 > hbm.kg_co2,
            "its worn drives' embodied share passes its operating carbon": ssd.ssd_embodied_kg > ssd.kg_co2}


def grid_spread(intensities: Sequence[float], between_strategies: float) -> dict[str, bool]:
    """Section 6: the grid moves the carbon far more (over 10x as much) than the storage strategy does."""
    return {"the grids' spread over 10x the strategies' ratio":
                max(intensities) / min(intensities) > 10 * between_strategies}


def published(at_meta: Sequence[Beside], as_labkit: Sequence[Beside]) -> dict[str, bool]:
    """Section 8: labkit's energy per GPU-hour is above Meta's; at PUE 1.0 and Meta's implied grid, the grid factor
    is 1, the energy factor within 5% and the GPU-hours (MFU) factor the largest left."""
    def off(x: float) -> float:
        return abs(math.log(x))

    return {"labkit's kWh per GPU-hour above Meta's": all(b.factors["kWh per GPU-hour"] > 1 for b in as_labkit),
            "at Meta's PUE and grid: the grid factor 1 and the energy factor within 5%":
                all(off(b.factors["gCO2e per kWh"]) < 0.005 and off(b.factors["kWh per GPU-hour"]) < 0.05
                    for b in at_meta),
            "what is left is mostly the GPU-hours factor":
                all(off(b.factors["GPU-hours"]) > off(b.factors["kWh per GPU-hour"]) for b in at_meta)}
