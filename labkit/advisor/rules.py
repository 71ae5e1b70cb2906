"""The rules that rule a layout out, each a published constraint (listed in ``search``), and how far a plan is
from fitting: the layout alone, the options no engine offers, and the memory of the GPU and of its host."""

from __future__ import annotations

from labkit.advisor.costing import OFFLOAD_STAGE, Layout, Machine
from labkit.errors import LabkitError
from labkit.hardware import GB
from labkit.shapes import ModelShape

__all__ = ["FIT_RULES", "RULES", "layout_problem", "memory_problems", "option_problem", "shortfall"]

RULES = ("gpus", "tp-heads", "tp-node", "pp-layers", "cp-seq", "memory", "host-dram", "nvme", "batch", "schedule",
         "zero-pipeline", "offload")
FIT_RULES = ("memory", "host-dram", "nvme")  # broken by size alone: a bigger machine would close the gap


def layout_problem(shape: ModelShape, lay: Layout, mc: Machine, seq: int = 0) -> tuple[str, str]:
    """(rule, why) a layout cannot be built at all, whatever its options; ("", "") when it can. ``seq`` (default
    the shape's) must split into 2 x cp equal chunks under context parallelism (Megatron's causal load balance)."""
    dev, node = mc.cluster.device, mc.cluster.gpus_per_node
    name = "NVLink" if dev.nvlink else "PCIe"
    if dev.nvlink:  # the NVLink/NVSwitch domain: the host's where it says, else the GPU's (8 on a DGX)
        node = min(node, mc.host.nvlink_domain_gpus or dev.nvlink_domain_gpus)
    if lay.gpus != mc.cluster.n_gpus:
        cp = " x cp" if lay.cp > 1 else ""
        return "gpus", f"dp x tp x pp{cp} = {lay.gpus}, not the {mc.cluster.n_gpus} GPUs of the cluster"
    if shape.heads % lay.tp:
        return "tp-heads", f"tp={lay.tp} does not divide the {shape.heads} attention heads"
    if lay.tp > node:
        return "tp-node", f"tp={lay.tp} crosses the {node}-GPU {name} domain of a node"  # over the network
    seq = seq or shape.seq
    if lay.cp > 1 and seq % (2 * lay.cp):
        return "cp-seq", f"cp={lay.cp} does not split the {seq} positions into 2 x cp equal chunks"
    try:
        lay.stage_layers(shape.layers)
    except LabkitError as err:
        return "pp-layers", str(err)
    return "", ""


def option_problem(lay: Layout) -> tuple[str, str]:
    """(rule, why) the engines do not offer this combination of options; ("", "") when they do."""
    if lay.pp > 1 and lay.zero_stage >= 2:
        return "zero-pipeline", (f"ZeRO-{lay.zero_stage} shards gradients, which pipeline parallelism "
                                 f"(pp={lay.pp}) needs whole")
    if lay.offload != "none":
        stages = (2, 3) if lay.offload == "dram" else (OFFLOAD_STAGE[lay.offload],)
        if lay.zero_stage not in stages:
            return "offload", (f"offload to {lay.offload} runs on ZeRO-{' or ZeRO-'.join(map(str, stages))} "
                               f"(got ZeRO-{lay.zero_stage})")
        if lay.precision != "bf16-mixed" or lay.optimizer_bits != 32:
            return "offload", f"offload to {lay.offload} keeps 16-bit weights and 32-bit Adam on the CPU"
    return "", ""


def memory_problems(mem: dict[str, float], mc: Machine) -> list[tuple[str, str]]:
    """(rule, why) for each place the plan's bytes do not fit: GPU memory, host DRAM, NVMe."""
    usable, node, out = mc.usable_bytes, mc.cluster.gpus_per_node, []
    cap, torch_can = mc.cluster.device.memory_bytes, mc.cluster.device.usable_memory_bytes
    if mem["total"] > usable:
        out.append(("memory", f"needs {mem['total'] / GB:,.1f} GB per GPU, holds {usable / GB:,.1f} "
                              f"({100 * mc.usable_fraction:.0f}% of the {torch_can / GB:.1f} GB torch can allocate "
                              f"of {cap / GB:.1f} GB, {cap / 2**30:.0f} GiB)"))
    if mem["dram"] * node > mc.dram_bytes:
        out.append(("host-dram", f"needs {mem['dram'] * node / GB:,.0f} GB of host DRAM per host, "
                                 f"{mc.host.name} has {mc.dram_bytes / GB:,.0f}"))
    if mem["nvme"] * node > mc.nvme_bytes:
        drives = (f"{mc.ssds_per_server} x {mc.ssd.capacity_bytes / 1e12:g} TB drive"
                  + ("s" if mc.ssds_per_server != 1 else "") if mc.ssd else "no NVMe")
        out.append(("nvme", f"needs {mem['nvme'] * node / GB:,.0f} GB of NVMe per host, {mc.host.name} has "
                            f"{mc.nvme_bytes / GB:,.0f} ({drives})"))
    return out


def shortfall(mem: dict[str, float], mc: Machine) -> float:
    """How far a plan is from fitting, as a fraction of what it may use (0 when it fits): the worst place."""
    node = mc.cluster.gpus_per_node
    worst = max(0.0, mem["total"] / mc.usable_bytes - 1)
    for need, have in ((mem["dram"] * node, mc.dram_bytes), (mem["nvme"] * node, mc.nvme_bytes)):
        if need > have:
            worst = max(worst, need / have - 1 if have else float("inf"))
    return worst
