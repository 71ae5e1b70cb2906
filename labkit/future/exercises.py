"""Self-check exercises of notebook 08, registered with ``labkit.teach.checks`` when imported."""

from __future__ import annotations

from labkit.future import near_data, pim
from labkit.teach.checks import Exercise, Mistake, register

PARAMS = 1_000_000_000


def _standard_link_bytes() -> float:
    return near_data.adam_paths(PARAMS).standard.link_bytes / 1e9


def _near_link_bytes() -> float:
    return near_data.adam_paths(PARAMS).near.link_bytes / 1e9


def _dram_pj_per_bit() -> float:
    return near_data.dram_j_per_bit() * 1e12


def _hbm_pim_roofline() -> float:
    return pim.model_view(pim.pim_result("HBM-PIM")).modelled_x


register("08.standard_link_gb", Exercise(
    "GB (1e9 bytes) crossing PCIe per step when a 1-billion-parameter model's Adam states (fp32 master weights and two "
    "moments) live in host DRAM but the step runs on the GPU (states in, states out)?",
    _standard_link_bytes,
    0.02,
    ("How many bytes per parameter are Adam's fp32 states, and how many times do they cross the link in one step?",
     "12 bytes per parameter of states, moved to the GPU and back."),
    lambda: f"{_standard_link_bytes():.0f} GB; run the step where the states live and only 16-bit gradients go down "
            f"and 16-bit weights come back: {_near_link_bytes():.0f} GB.",
    (Mistake("the states moved one way only: the updated states must come back to DRAM",
             lambda: _standard_link_bytes() / 2),
     Mistake("the near-data path's bytes: there the states stay in DRAM and only gradients and weights cross",
             _near_link_bytes),
     Mistake("16 bytes per parameter each way: the 16-bit weights and gradients are not Adam's states",
             lambda: _standard_link_bytes() * 16 / 12)),
    unit="GB",
))
register("08.dram_pj_per_bit", Exercise(
    "Picojoules per bit of a DRAM read, from the 640 pJ per 32-bit read of Han et al. 2015 (45 nm, after Horowitz)?",
    _dram_pj_per_bit,
    0.02,
    ("The 640 pJ pays for a whole 32-bit word.",
     "Divide by the 32 bits of the word."),
    "20 pJ per bit: one 32-bit read costs about 700 fp32 adds (0.9 pJ each); in-memory computing avoids the trip.",
    (Mistake("the whole word's 640 pJ: divide by its 32 bits", lambda: 32 * _dram_pj_per_bit()),
     Mistake("per byte of the word (divided by 4): the question asks per bit", lambda: 8 * _dram_pj_per_bit()),
     Mistake("divided by 64, a 64-bit access: Han et al.'s read is 32 bits", lambda: _dram_pj_per_bit() / 2)),
    unit="pJ/bit",
))
register("08.hbm_pim_roofline", Exercise(
    "A memory-bound kernel: how many times faster is it run inside HBM-PIM at 1.2 TB/s of internal bandwidth than by a "
    "host reading the same memory at 307.2 GB/s (the roofline, bandwidth only)?",
    _hbm_pim_roofline,
    0.02,
    ("A memory-bound kernel's time is bytes / bandwidth; the bytes are the same in both places.",
     "So the speedup is the ratio of the bandwidths: put both in GB/s first."),
    lambda: f"{_hbm_pim_roofline():.2f}x by the roofline; the paper reports more than 2x on real kernels.",
    (Mistake("the inverse ratio: the host's bandwidth over the PIM's", lambda: 1 / _hbm_pim_roofline()),
     Mistake("TB/s and GB/s divided as they stand (1.2 / 307.2): put both in GB/s",
             lambda: _hbm_pim_roofline() / 1000)),
))
