"""Self-check exercises of notebook 04, registered with ``labkit.teach.checks`` when imported."""

from __future__ import annotations

from labkit.hardware import link, transfer_time
from labkit.offload.zero_infinity import PAPER_BYTES_PER_PARAM
from labkit.predict.offload_model import ZERO3, ZERO_OFFLOAD
from labkit.teach.checks import Exercise, Mistake, register

PARAMS, DP = 7e9, 8


def _offload_gpu_gb(dp: int = DP) -> float:
    """GB of model states ZeRO-Offload leaves on each GPU (Ren et al., ATC 2021: 2 Psi of 16-bit weights)."""
    return ZERO_OFFLOAD.gpu_bytes_per_param(dp) * PARAMS / 1e9


def _pcie_seconds(name: str = "pcie4-x16", both_directions: bool = False) -> float:
    lk = link(name)
    if both_directions:
        return lk.latency_s + 10e9 / (2 * lk.bandwidth)
    return transfer_time(10e9, lk)


def _infinity_tb(bytes_per_param: float = PAPER_BYTES_PER_PARAM) -> float:
    return bytes_per_param * 1e12 / 1e12  # bytes of model states per parameter, 1e12 of them, in TB


register("04.offload_gpu_gb", Exercise(
    "ZeRO-Offload trains a 7-billion-parameter model with mixed-precision Adam on 8 data-parallel GPUs. How many "
    "GB (1e9 bytes) of model states does each GPU keep?",
    _offload_gpu_gb,
    0.02,
    ("Sort the 16 bytes per parameter into what lives on the GPU and what ZeRO-Offload moves to the CPU (Ren et "
     "al., ATC 2021, section 4).",
     "Only the 16-bit weights stay on the GPU, and ZeRO-Offload is built on ZeRO-2, which does not partition the "
     "weights: 2 bytes x 7e9 on every GPU."),
    lambda: f"{_offload_gpu_gb():.0f} GB on every GPU, however many there are; ZeRO-3 on the GPUs alone would hold "
    f"{ZERO3.gpu_bytes_per_param(DP) * PARAMS / 1e9:.0f} GB each.",
    (Mistake("the 16-bit weights divided over the 8 GPUs: ZeRO-Offload is built on ZeRO-2, so every GPU keeps them "
             "whole", lambda: _offload_gpu_gb() / DP),
     Mistake("the 16-bit gradients kept on the GPU too: ZeRO-Offload moves them to the CPU",
             lambda: 2 * _offload_gpu_gb()),
     Mistake("all 16 bytes per parameter on the GPU: nothing offloaded", lambda: 16 * PARAMS / 1e9)),
    unit="GB",
))
register("04.pcie_seconds", Exercise(
    "Seconds to move 10 GB of activations one way over PCIe 4 x16 (catalogue figures)?",
    _pcie_seconds,
    0.02,
    ("A transfer takes its latency plus its bytes over the link's bandwidth; which bandwidth does a one-way copy "
     "get?",
     "latency + bytes / bandwidth, with the pcie4-x16 link's per-direction bandwidth from datasets/hardware.toml."),
    lambda: f"{_pcie_seconds():.2f} s: vDNN hides this only if a layer's compute takes at least as long.",
    (Mistake("both directions' bandwidth added up: a one-way copy gets one direction's", lambda: _pcie_seconds(
        both_directions=True)),
     Mistake("PCIe 3 x16's bandwidth (half of PCIe 4's)", lambda: _pcie_seconds("pcie3-x16"))),
    unit="s",
))
register("04.infinity_tb", Exercise(
    "TB (1e12 bytes) of model states for a 1-trillion-parameter model at ZeRO-Infinity's 20 bytes per parameter?",
    _infinity_tb,
    0.0,
    ("ZeRO-Infinity's count: 16-bit parameters and gradients, plus fp32 parameters, momentum, variance and "
     "gradients. Bytes per parameter times parameters.",
     "20 bytes times 1e12 parameters, in TB."),
    "20 TB: more than the 1.5 TB of DRAM of a DGX-2 and less than its 30 TB of NVMe; hence states on NVMe.",
    (Mistake("16 bytes per parameter, ZeRO's mixed-precision count: ZeRO-Infinity adds fp32 gradients (4 more)",
             lambda: _infinity_tb(16)),
     Mistake("the optimizer states only (12 bytes per parameter)", lambda: _infinity_tb(12))),
    unit="TB",
))
