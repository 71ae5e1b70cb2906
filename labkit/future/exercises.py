"""Self-check exercises of notebook 08, registered with ``labkit.teach.checks`` when imported."""

from __future__ import annotations

from labkit.future import near_data, pim
from labkit.teach.checks import Exercise, register


def _standard_link_bytes() -> float:
    paths = near_data.adam_paths(1_000_000_000)
    return paths.standard.link_bytes / 1e9


def _near_link_bytes() -> float:
    return near_data.adam_paths(1_000_000_000).near.link_bytes / 1e9


def _dram_pj_per_bit() -> float:
    return near_data.dram_j_per_bit() * 1e12


def _hbm_pim_roofline() -> float:
    return pim.model_view(pim.pim_result("HBM-PIM")).modelled_x


register("08.standard_link_gb", Exercise(
    "GB (1e9 bytes) crossing PCIe per step when a 1-billion-parameter model's Adam states (fp32 master weights and two "
    "moments) live in host DRAM but the step runs on the GPU (states in, states out)?",
    _standard_link_bytes,
    0.02,
    "12 bytes per parameter of states, moved to the GPU and back.",
    lambda: f"{_standard_link_bytes():.0f} GB; run the step where the states live and only 16-bit gradients go down "
            f"and 16-bit weights come back: {_near_link_bytes():.0f} GB.",
))
register("08.dram_pj_per_bit", Exercise(
    "Picojoules per bit of a DRAM read, from the 640 pJ per 32-bit read of Han et al. 2015 (45 nm, after Horowitz)?",
    _dram_pj_per_bit,
    0.02,
    "Divide by the 32 bits of the word.",
    "20 pJ per bit: one 32-bit read costs about 700 fp32 adds (0.9 pJ each); in-memory computing avoids the trip.",
))
register("08.hbm_pim_roofline", Exercise(
    "A memory-bound kernel: how many times faster is it run inside HBM-PIM at 1.2 TB/s of internal bandwidth than by a "
    "host reading the same memory at 307.2 GB/s (the roofline, bandwidth only)?",
    _hbm_pim_roofline,
    0.02,
    "A memory-bound kernel's time is bytes / bandwidth: the ratio of the bandwidths.",
    lambda: f"{_hbm_pim_roofline():.2f}x by the roofline; the paper reports more than 2x on real kernels.",
))
