"""What one step costs and yields, in the units people compare: dollars, energy and carbon, tokens and FLOPs.

Money is GPU-hours at the catalogue's cloud price where it has one (rented), else the purchase price
amortised (owned, ``economics.capital``); energy and carbon are ``economics.energy.step_energy`` times
the site's PUE and the grid's intensity (``economics.grid``), or unknown, with the reason, for a GPU
without energy figures. Tokens and FLOPs per step give the units published tables print: tokens/s
per GPU, model TFLOP/s per GPU (without recompute FLOPs, and with them as Narayanan et al. 2021
count them) and MFU (Chowdhery et al., PaLM, 2022).
"""

from __future__ import annotations

import math
from functools import lru_cache

from labkit.advisor import stages, steptime
from labkit.advisor.costing import TIMES, Layout, dtypes, microbatches
from labkit.advisor.machine import Machine
from labkit.economics import capital, energy, grid
from labkit.predict.estimate import PRECISIONS, training_flops
from labkit.shapes import ModelShape


def units(shape: ModelShape, seq: int, global_batch: int, lay: Layout, mc: Machine) -> dict:
    """A plan's fields for the field's units: tokens and FLOPs per step, the peak, the framework."""
    dtype = dtypes(lay, mc.cluster.device)[1]  # MFU against the peak the GEMMs run at
    return {"tokens": float(global_batch * seq), "model_flops": training_flops(shape, seq, global_batch),
            "hardware_flops": training_flops(shape, seq, global_batch, lay.recompute),
            "peak_flops": mc.cluster.device.peak_flops[dtype], "framework": mc.profile.name,
            "stage_split": stages.label(lay.stage_layers(shape.layers))}


@lru_cache(maxsize=16)
def _rates(gpu: str, host: str, dram: str, ssd: str) -> energy.Rates:
    return energy.rates(gpu, host, dram, ssd)


def usd_basis(mc: Machine) -> str:
    """"rented" at the catalogue's cloud price per GPU-hour, else "owned" (purchase price amortised)."""
    return "rented" if mc.cluster.device.cloud_usd_per_hour is not None else "owned"


def energy_missing(mc: Machine) -> str:
    """Why energy and carbon are unknown on this machine ("" when they are known)."""
    dev = mc.cluster.device
    if dev.memory_energy_j_per_bit is None:
        return (f"unknown: the catalogue has no memory_energy_pj_per_bit for {dev.name}, so the HBM/GDDR part of "
                f"the energy model has no figure")
    return ""


def price(shape: ModelShape, global_batch: int, lay: Layout, mc: Machine, t: dict[str, float],
          acts_per_gpu: float) -> tuple[float, float, float | None, float | None]:
    """(step seconds, USD, facility joules, kg CO2) of one step with times ``t``; energy None when unknown."""
    dev, n = mc.cluster.device, lay.gpus
    step = sum(t[k] for k in TIMES)
    m = microbatches(global_batch, lay)
    usd = (capital.cloud_usd(n, step, dev.name) if usd_basis(mc) == "rented"
           else capital.amortised_usd(n * dev.price_usd, step))
    if energy_missing(mc):
        return step, usd, None, None
    e = PRECISIONS[lay.states].weights
    hbm = n * m * e * shape.params / (lay.tp * lay.pp) + 2 * acts_per_gpu * n  # weights read per micro-batch
    hbm += (steptime.ADAM_BYTES[lay.optimizer_bits] + 4) * shape.params if lay.offload == "none" else 0.0
    traffic = energy.StepTraffic(
        gpus=n, hosts=math.ceil(n / mc.cluster.gpus_per_node), busy_s=t["compute"], stall_s=step - t["compute"],
        host_busy_s=min(t["cpu"], step), hbm_bytes=hbm, pcie_bytes=n * t["pcie_bytes"], peer_bytes=n * t["peer_bytes"],
        dram_bytes=2 * steptime.ADAM_BYTES[32] * shape.params if lay.offload != "none" else 0.0,
        ssd_read_bytes=n * t["nvme_read"], ssd_write_bytes=n * t["nvme_write"])
    ssd = mc.ssd.name if mc.ssd is not None else "NVMe-PCIe4"
    it = energy.step_energy(traffic, _rates(dev.name, mc.host.name, mc.dram.name, ssd))
    facility = it.facility_j(grid.pue(mc.pue))
    return step, usd, facility, grid.carbon_kg(facility, grid.region(mc.region).value)


def run_totals(plan, tokens: float) -> dict[str, float | None]:
    """A whole training run of ``tokens`` tokens at ``plan``'s step: steps, days, GPU-hours, USD, kWh, kg CO2
    (None where the plan has no finite figure). The step is the plan's, so the totals inherit its error."""
    if not plan.tokens or not math.isfinite(plan.step_s):
        return dict.fromkeys(("steps", "days", "gpu_hours", "usd", "kwh", "kg_co2"))
    steps = math.ceil(tokens / plan.tokens)
    seconds = steps * plan.step_s

    def total(x: float | None) -> float | None:
        return None if x is None or not math.isfinite(x) else steps * x

    kwh = total(plan.energy_j)
    return {"steps": float(steps), "days": seconds / 86400, "gpu_hours": seconds * plan.layout.gpus / 3600,
            "usd": total(plan.usd), "kwh": None if kwh is None else kwh / 3.6e6, "kg_co2": total(plan.kg_co2)}
