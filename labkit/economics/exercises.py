"""Self-check exercises of notebook 07, registered with ``labkit.teach.checks`` when imported."""

from __future__ import annotations

from labkit.economics import capital, energy, grid, wear
from labkit.teach.checks import Exercise, register


def _hbm_over_ssd() -> float:
    return capital.usd_per_gb("hbm") / capital.usd_per_gb("ssd")


def _co2_kg_per_mwh(region: str = "france") -> float:
    return grid.carbon_kg(grid.kwh_to_joules(1000.0), grid.region(region).value)


def _ssd_lives(params: float = 7e9, bytes_per_param: float = 16.0, steps: int = 10_000) -> float:
    return wear.ssd_wear(params * bytes_per_param * steps, drive="NVMe-U2-3.84TB").life_used


register("07.hbm_over_ssd", Exercise(
    "How many times more does a GB of HBM (an H100's price over its memory) cost than a GB of NVMe SSD?",
    _hbm_over_ssd,
    0.05,
    "Divide the two $/GB figures of the catalogue (capital.usd_per_gb('hbm') and ('ssd')).",
    lambda: f"About {_hbm_over_ssd():,.0f}x: capacity is cheap far from the GPU, bandwidth is not.",
))
register("07.dram_read_fmas", Exercise(
    "Han et al. 2015 (45 nm, after Horowitz): how many fp32 multiply-adds cost the energy of one 32-bit DRAM read?",
    energy.dram_read_over_fma,
    0.05,
    "640 pJ for the DRAM read; 3.7 pJ for the multiply plus 0.9 pJ for the add.",
    lambda: f"About {energy.dram_read_over_fma():.0f}: moving data costs more than computing on it.",
))
register("07.co2_france", Exercise(
    "kg of CO2 for 1 MWh of facility energy on France's grid (the lab's data file)?",
    _co2_kg_per_mwh,
    0.02,
    "gCO2/kWh times 1,000 kWh, in kg.",
    lambda: f"{_co2_kg_per_mwh():.0f} kg, against {_co2_kg_per_mwh('world'):.0f} kg at the world average.",
))
register("07.ssd_lives", Exercise(
    "Fractions of one 3.84 TB enterprise NVMe drive's rated endurance (1 drive write per day for 5 years) used "
    "by writing 16 bytes per parameter per step for 10,000 steps of a 7-billion-parameter model?",
    _ssd_lives,
    0.02,
    "bytes written = 7e9 x 16 x 10,000; endurance = 1 x 3,840 GB x 365 x 5 (in bytes); divide.",
    lambda: f"{_ssd_lives():.2f} drive lifetimes: offload to SSD wears drives out, so spread it over many.",
))
