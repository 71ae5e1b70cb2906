"""ZeRO-Infinity at scale: what fits one node by where the states live, and the NVMe seconds of a step.

Rajbhandari et al., "ZeRO-Infinity", SC 2021. Bytes per parameter come from
``labkit.predict.offload_model`` (the paper's 20 B of model states, ``ZERO_INFINITY``; this lab's
streamed run's traffic, ``ZERO_INFINITY_LAB``). GPU capacities are the catalogue's true ones
(``Device.memory_bytes``: a "32 GB" V100 holds 32 GiB); DRAM and NVMe sizes are in 1e9 bytes,
as their data sheets give them.
"""

from __future__ import annotations

from dataclasses import dataclass

from labkit.errors import require_positive
from labkit.hardware import gpu, tier
from labkit.offload.zero_infinity import PAPER_BYTES_PER_PARAM, io_bytes_per_step
from labkit.references import headline


@dataclass(frozen=True)
class NodeFit:
    """Largest model whose states fit each tier of one node, at ``bytes_per_param`` of states."""

    gpus: int
    gpu_memory_bytes: float
    dram_bytes: float
    nvme_bytes: float
    bytes_per_param: int
    params_gpu_only: float
    params_dram: float
    params_nvme: float
    published_params: float
    published_claim: str


def dgx2_fit(gpu_name: str = "V100-32GB", gpus: int = 16, dram_bytes: float = 1.5e12, nvme_bytes: float = 30e12,
             bytes_per_param: int = PAPER_BYTES_PER_PARAM) -> NodeFit:
    """What fits on one DGX-2 (16 x V100-32GB, 1.5 TB DRAM, 30 TB NVMe) by where the states live.

    Model states only (Rajbhandari et al. 2021, section 3 and Fig. 2a): activations, buffers
    and the working set of one layer are left out, so each figure is an upper bound. With
    states on NVMe the 30 TB / 20 B = 1.5T bound sits beside the paper's 1T, which also had
    to fit activation checkpoints and per-layer working memory.
    """
    for name, value in (("gpus", gpus), ("dram_bytes", dram_bytes), ("nvme_bytes", nvme_bytes),
                        ("bytes_per_param", bytes_per_param)):
        require_positive(name, value, integer=name in ("gpus", "bytes_per_param"))
    hbm = gpus * gpu(gpu_name).memory_bytes
    ref = headline("ZeRO-Infinity")
    return NodeFit(gpus, hbm, dram_bytes, nvme_bytes, bytes_per_param, hbm / bytes_per_param,
                   dram_bytes / bytes_per_param, nvme_bytes / bytes_per_param, float(ref["params"]), ref["claim"])


def nvme_step_seconds(params: float, block_fraction: float = 1.0, ssd: str = "NVMe-PCIe4", drives: int = 16) -> float:
    """Seconds per step spent on NVMe traffic of :func:`io_bytes_per_step` with ``drives`` in parallel.

    Assumes the drives' data-sheet sequential bandwidth, aggregated linearly (the paper's
    DGX-2 has 16 NVMe drives); a lower bound, as reads and writes do not overlap here.
    """
    require_positive("params", params, integer=False)
    t = tier(ssd)
    io = io_bytes_per_step(int(params), int(params * block_fraction))
    return io["read"] / (drives * t.read_bandwidth) + io["write"] / (drives * t.write_bandwidth)
