"""Self-check exercises of notebook 04, registered with ``labkit.teach.checks`` when imported."""

from __future__ import annotations

from labkit.hardware import link, transfer_time
from labkit.offload.zero_infinity import PAPER_BYTES_PER_PARAM
from labkit.offload.zero_offload import offload_bytes_per_step
from labkit.teach.checks import Exercise, register


def _zero_offload_gb() -> float:
    return offload_bytes_per_step(1_000_000_000) / 1e9


def _pcie4_seconds_10gb() -> float:
    return transfer_time(10e9, link("pcie4-x16"))


def _infinity_tb_1t() -> float:
    return PAPER_BYTES_PER_PARAM * 1e12 / 1e12  # ZeRO-Infinity's bytes of model states per parameter, 1e12 of them


register("04.zero_offload_gb", Exercise(
    "GB (1e9 bytes) ZeRO-Offload moves over PCIe per step for a 1-billion-parameter model (both directions)?",
    _zero_offload_gb,
    0.0,
    "16-bit gradients go down to the CPU, updated 16-bit parameters come back up: 2 bytes each way per parameter.",
    "4 GB: 2 Psi down, 2 Psi up; the 12 bytes per parameter of optimizer state never cross the link.",
))
register("04.pcie_seconds", Exercise(
    "Seconds to move 10 GB of activations one way over PCIe 4 x16 (catalogue figures)?",
    _pcie4_seconds_10gb,
    0.02,
    "latency + bytes / bandwidth, with the pcie4-x16 link's per-direction bandwidth from datasets/hardware.toml.",
    lambda: f"{_pcie4_seconds_10gb():.2f} s: vDNN hides this only if a layer's compute takes at least as long.",
))
register("04.infinity_tb", Exercise(
    "TB (1e12 bytes) of model states for a 1-trillion-parameter model at ZeRO-Infinity's 20 bytes per parameter?",
    _infinity_tb_1t,
    0.0,
    "20 bytes times 1e12 parameters, in TB.",
    "20 TB: more than the 1.5 TB of DRAM of a DGX-2 and less than its 30 TB of NVMe; hence states on NVMe.",
))
