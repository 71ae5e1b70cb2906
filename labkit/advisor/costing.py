"""One layout on one machine: its step time, from the validated models (the layout and plan are ``layout``'s).

Memory is ``footprint`` (``labkit.predict.estimate.estimate_memory`` with 8-bit Adam states and
offload as corrections); offload's bytes come from ``labkit.predict.offload_model``, the one
source the economics and offload modules use too (``OFFLOAD_MODELS``): ZeRO-Offload on ZeRO-2
(Ren et al., ATC 2021), the same host side on ZeRO-3 (DeepSpeed's ``offload_optimizer`` with
stage 3), and ZeRO-Infinity on ZeRO-3 (Rajbhandari et al., SC 2021: every state on NVMe, two
layers of 16-bit weights in flight on the GPU).

Step time is ``steptime`` (kernels from a roofline of the shapes, the schedule's bubble, each
collective once with the overlap the real systems achieve, Adam, offload traffic). Dollars,
energy, carbon and the field's units (tokens/s, TFLOP/s, MFU) are ``pricing``'s.
"""

from __future__ import annotations

import math

from labkit import hardware
from labkit.advisor import steptime
from labkit.advisor.layout import GOAL_METRIC, GOALS, OFFLOADS, OPTIMIZER_BITS, PLAN_PRECISIONS, Layout, Plan
from labkit.advisor.machine import DEFAULT_HEADROOM, Machine, machine
from labkit.errors import LabkitError
from labkit.hardware import transfer_time
from labkit.predict import collectives as coll
from labkit.predict import compute
from labkit.predict import offload_model as om
from labkit.predict.estimate import PRECISIONS
from labkit.shapes import ModelShape

__all__ = ["DEFAULT_HEADROOM", "GOALS", "GOAL_METRIC", "OFFLOADS", "OFFLOAD_MODELS", "OFFLOAD_STAGE", "OPTIMIZER_BITS",
           "PLAN_PRECISIONS", "TIMES", "Layout", "Machine", "Plan", "machine", "offload_model", "step_times"]

OFFLOAD_MODELS = {"dram": om.ZERO_OFFLOAD, "nvme": om.ZERO_INFINITY}
OFFLOAD_STAGE = {"dram": 2, "nvme": 3}  # the stage each offload is published on (ZeRO-3 + DRAM also allowed)
TIMES = steptime.TIMES


def offload_model(offload: str, zero_stage: int) -> om.OffloadModel | None:
    """The ``labkit.predict.offload_model`` strategy a layout's offload runs (None without offload)."""
    if offload == "none":
        return None
    if offload == "dram" and zero_stage == 3:
        return om.ZERO3_CPU_OFFLOAD  # DeepSpeed's offload_optimizer on stage 3
    return OFFLOAD_MODELS[offload]


def dtypes(lay: Layout, dev) -> tuple[str, str]:
    """(element-wise dtype, GEMM dtype) of a layout on ``dev``: fp32 GEMMs at TF32 where the GPU has it."""
    if lay.precision == "fp32":
        return "fp32", "tf32" if "tf32" in dev.peak_flops else "fp32"
    if lay.precision == "fp8" and "fp8" not in dev.peak_flops:
        with_fp8 = [g.name for g in hardware.load_catalogue().gpus if "fp8" in g.peak_flops]
        raise LabkitError(f"precision fp8 needs a GPU with FP8 tensor cores: one of {', '.join(with_fp8)} "
                          f"(got {dev.name})")
    return "bf16", "fp8" if lay.precision == "fp8" else "bf16"


def microbatches(global_batch: int, lay: Layout) -> int:
    return max(1, global_batch // (lay.dp * lay.micro_batch))


def links(lay: Layout, mc: Machine) -> dict:
    """The link each group uses, in Megatron-Core's rank order: tp innermost in a node, then cp, dp, pp.

    A data-parallel group (dp x cp GPUs, ``steptime``) that spans nodes holds node / tp of its GPUs on each
    node and runs over that many of the node's network ports (``collectives.node_link``) where the
    framework's rings use them (``profiles``), else one; a pipeline send, and a context-parallel ring's
    send between nodes, goes from each GPU over its own port (Narayanan et al. 2021, section 4.1,
    scatter/gather)."""
    node, cl = mc.cluster.gpus_per_node, mc.cluster
    group = lay.dp * lay.cp
    dp_on_node = max(1, min(group, node // lay.tp))
    ports = min(mc.ports, dp_on_node) if mc.profile.aggregate_ports else 1
    dp = cl.intra_node if lay.tp * group <= node else coll.node_link(cl.inter_node, ports, cl.intra_node)
    return {"tp": cl.intra_node, "cp": cl.intra_node if lay.tp * lay.cp <= node else cl.inter_node, "dp": dp,
            "pp": cl.intra_node if lay.gpus <= node else cl.inter_node}


def step_times(shape: ModelShape, seq: int, global_batch: int, lay: Layout, mc: Machine) -> dict[str, float]:
    """Seconds of one step by part (``TIMES``, summing to the step) plus the CPU's share and the bytes moved."""
    dev = mc.cluster.device
    dtype, gemm = dtypes(lay, dev)
    e = PRECISIONS[lay.states].weights
    m, ln = microbatches(global_batch, lay), links(lay, mc)
    prof = mc.profile
    counts, flash, s_local = lay.stage_layers(shape.layers), lay.attention == "fused", seq / lay.cp
    k = max((compute.stage_seconds(shape, seq, lay.micro_batch, lay.tp, lay.pp, dev, dtype, lay.seq_parallel,
                                   flash, lay.recompute, layers=n, gemm_efficiency=prof.gemm_efficiency,
                                   logits=i == len(counts) - 1, gemm_dtype=gemm, cp=lay.cp,
                                   **prof.layer_kwargs(shape))
             for i, n in enumerate(counts) if i in (0, 1, len(counts) - 1)), key=lambda d: sum(d.values()))
    stage_params = shape.params * max(counts) / shape.layers / lay.tp  # ZeRO-2/3 accumulate only their shard
    stage_params /= lay.dp * lay.cp if lay.zero_stage >= 2 else 1
    kernels_mb = k["forward"] + k["backward"] + k["recompute"] + steptime.framework_seconds(shape, seq, lay, dev, prof)
    kernels_mb += steptime.grad_accum_seconds(stage_params, dev, prof)
    tp_mb = steptime.tp_seconds(shape, s_local, lay, ln["tp"], e, kernels_mb if prof.overlap_tp else 0.0)
    attention_s = compute.layer_times(shape, seq, lay.micro_batch, lay.tp, dev, dtype, lay.seq_parallel, flash,
                                      gemm_efficiency=prof.gemm_efficiency, gemm_dtype=gemm, cp=lay.cp).attention
    cp_mb = steptime.cp_seconds(shape, seq, lay, ln["cp"], e, attention_s, prof)
    pp_mb = steptime.pp_seconds(shape, s_local, lay, ln["pp"], mc.cluster.intra_node, e)
    out = dict.fromkeys((*TIMES, "cpu", "peer_bytes", "pcie_bytes", "nvme_read", "nvme_write"), 0.0)
    out["compute"], out["tp"], out["cp"], out["pp"] = m * kernels_mb, m * tp_mb, m * cp_mb, m * pp_mb
    out["bubble"] = (lay.pp - 1) / lay.chunks * (kernels_mb + tp_mb + cp_mb + pp_mb)
    local = shape.params / (lay.tp * lay.pp)
    moved, out["dp"] = steptime.dp_seconds(local, lay, m, ln["dp"], PRECISIONS[lay.states].grads, e,
                                           k["backward"], kernels_mb, prof,
                                           steptime.regather_share(shape, lay, prof))
    out["peer_bytes"] = moved + out["tp"] * coll.bandwidth(ln["tp"]) + out["pp"] * ln["pp"].bandwidth
    out["peer_bytes"] += out["cp"] * ln["cp"].bandwidth
    shard = local / (lay.dp * lay.cp if lay.zero_stage >= 1 else 1)
    out["optimizer"] = steptime.optimizer_seconds(shard, lay, dev)
    mdl = offload_model(lay.offload, lay.zero_stage)
    if mdl is not None:
        psi = local / (lay.dp * lay.cp)
        again = 2.0 * (m - 1) if mdl.streams_layers else 0.0  # 16-bit weights fetched again per extra micro-batch
        out["pcie_bytes"] = (mdl.link_bytes_per_param() + again) * psi
        out["nvme_read"] = (mdl.nvme_read_bytes_per_param() + again) * psi
        out["nvme_write"] = mdl.nvme_write_bytes_per_param() * psi
        pcie_s = transfer_time(out["pcie_bytes"], hardware.link(dev.pcie))
        gpus_here = mc.cluster.gpus_per_node
        step_bytes = mdl.step_bytes_per_param() * psi * gpus_here
        out["cpu"] = step_bytes / mc.dram_bandwidth
        nvme_s = 0.0
        if out["nvme_read"] or out["nvme_write"]:
            drives = mc.ssds_per_server / gpus_here
            if mc.ssd is None or drives == 0:
                nvme_s = math.inf
            else:
                nvme_s = (out["nvme_read"] / (mc.ssd.read_bandwidth * drives)
                          + out["nvme_write"] / (mc.ssd.write_bandwidth * drives))
        out["offload"] = max(pcie_s, nvme_s) + out["cpu"]
    return out
