"""When nothing fits: how far the nearest plans are from fitting, and what would close the gap.

A plan rejected for size alone (GPU memory, host DRAM, NVMe: ``rules.FIT_RULES``) is short by a
number of bytes somewhere. The closers named are the ones that change that number: a GPU of the
catalogue that holds it, less headroom, more GPUs to shard over (ZeRO-3 divides the model states
by the data-parallel GPUs; tensor and pipeline parallelism by t x p), a host with more DRAM or more
NVMe drives. They are estimates for the learner to try, each one re-judged by the advisor.
"""

from __future__ import annotations

import math

from labkit import hardware
from labkit.advisor.costing import Plan
from labkit.advisor.machine import Machine
from labkit.hardware import GB


def _bigger_gpus(need_bytes: float, mc: Machine) -> list[str]:
    return [g.name for g in hardware.load_catalogue().gpus
            if g.memory_bytes * mc.usable_fraction >= need_bytes and g.name != mc.cluster.device.name]


def _gpu_gap(mem: dict[str, float], lay_offload: str, mc: Machine) -> str:
    need, have = mem["total"], mc.usable_bytes
    states = sum(mem[k] for k in ("parameters", "gradients", "optimizer"))
    out = [f"short by {(need - have) / GB:,.1f} GB per GPU (needs {need / GB:,.1f}, holds {have / GB:,.1f})"]
    bigger = _bigger_gpus(need, mc)
    if bigger:
        out.append(f"a GPU that holds it: {', '.join(bigger)}")
    if need <= mc.cluster.device.memory_bytes:
        out.append(f"headroom {max(0.0, 1 - need / mc.cluster.device.memory_bytes):.0%} instead of {mc.headroom:.0%}")
    if lay_offload == "none" and states > need - have:
        factor = states / max(states - (need - have), 1.0)
        out.append(f"about {math.ceil(factor * 10) / 10:g}x the GPUs to shard the model states over")
    return "; ".join(out)


def gap(plan: Plan, mc: Machine) -> str:
    """How much is missing for ``plan`` (every place it overflows) and what would close it, in one line."""
    mem, node = plan.memory, mc.cluster.gpus_per_node
    if not mem:
        return plan.reason
    out = []
    if mem["total"] > mc.usable_bytes:
        out.append(_gpu_gap(mem, plan.layout.offload, mc))
    need = mem["dram"] * node
    if need > mc.dram_bytes:
        out.append(f"short by {(need - mc.dram_bytes) / GB:,.0f} GB of host DRAM (needs {need / GB:,.0f} per host, "
                   f"{mc.host.name} has {mc.dram_bytes / GB:,.0f}): a host with more DRAM, more hosts to shard over, "
                   f"or offload to NVMe")
    need = mem["nvme"] * node
    if need > mc.nvme_bytes:
        per = mc.ssd.capacity_bytes if mc.ssd else 0.0
        drives = f"{math.ceil(need / per)} drives of {per / 1e12:g} TB" if per else "NVMe drives"
        out.append(f"short by {(need - mc.nvme_bytes) / GB:,.0f} GB of NVMe (needs {need / GB:,.0f} per host, "
                   f"{mc.host.name} has {mc.nvme_bytes / GB:,.0f}): {drives}, or more hosts to shard over")
    return "; and ".join(out) or plan.reason
