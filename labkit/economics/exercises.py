"""Self-check exercises of notebook 07, registered with ``labkit.teach.checks`` when imported."""

from __future__ import annotations

from labkit.economics import capital, energy, grid, wear
from labkit.teach.checks import Exercise, Mistake, register

DRIVE = "NVMe-U2-3.84TB"


def _hbm_over(kind: str = "ssd") -> float:
    return capital.usd_per_gb("hbm") / capital.usd_per_gb(kind)


def _co2_kg_per_mwh(region: str = "france") -> float:
    return grid.carbon_kg(grid.kwh_to_joules(1000.0), grid.region(region).value)


def _ssd_lives(params: float = 7e9, bytes_per_param: float = 16.0, steps: int = 10_000) -> float:
    return wear.ssd_wear(params * bytes_per_param * steps, drive=DRIVE).life_used


def _fmas(part: str = "both") -> float:
    """DRAM reads' energy over an fp32 multiply-add's, or over its multiply or add alone (Han et al. 2015)."""
    if part == "both":
        return energy.dram_read_over_fma()
    pj = energy.han_pj()
    return pj["dram_read_32bit"] / pj[part]


def _one_drive_write_lives() -> float:
    """Lives used if the endurance were one full write of the drive (its capacity), not its rated TBW."""
    from labkit import hardware

    tier = hardware.tier(DRIVE)
    return _ssd_lives() * tier.endurance_bytes / tier.capacity_bytes


register("07.hbm_over_ssd", Exercise(
    "How many times more does a GB of HBM (an H100's price over its memory) cost than a GB of NVMe SSD?",
    _hbm_over,
    0.05,
    ("Each tier's price per GB is in the catalogue: an H100's price over its memory for HBM, the drive's street "
     "price for SSD.",
     "Divide the two $/GB figures of the catalogue (capital.usd_per_gb('hbm') and ('ssd'))."),
    lambda: f"About {_hbm_over():,.0f}x: capacity is cheap far from the GPU, bandwidth is not.",
    (Mistake("the inverse ratio: SSD's $/GB over HBM's", lambda: 1 / _hbm_over()),
     Mistake("DRAM's price per GB taken for the SSD's: DRAM sits between the two", lambda: _hbm_over("dram"))),
))
register("07.dram_read_fmas", Exercise(
    "Han et al. 2015 (45 nm, after Horowitz): how many fp32 multiply-adds cost the energy of one 32-bit DRAM read?",
    _fmas,
    0.05,
    ("Han et al.'s table gives the energy of a 32-bit DRAM read and of an fp32 multiply and an fp32 add.",
     "640 pJ for the DRAM read; a multiply-add is a multiply (3.7 pJ) plus an add (0.9 pJ)."),
    lambda: f"About {_fmas():.0f}: moving data costs more than computing on it.",
    (Mistake("the multiply alone: a multiply-add also pays for the add", lambda: _fmas("fp32_multiply")),
     Mistake("the add alone: a multiply-add also pays for the multiply", lambda: _fmas("fp32_add"))),
))
register("07.co2_france", Exercise(
    "kg of CO2 for 1 MWh of facility energy on France's grid (the lab's data file)?",
    _co2_kg_per_mwh,
    0.02,
    ("The grid file gives each region's carbon intensity in g CO2 per kWh; a MWh is 1,000 kWh.",
     "gCO2/kWh times 1,000 kWh gives grams: divide by 1,000 for kg."),
    lambda: f"{_co2_kg_per_mwh():.0f} kg, against {_co2_kg_per_mwh('world'):.0f} kg at the world average.",
    (Mistake("the world average's intensity, not France's", lambda: _co2_kg_per_mwh("world")),
     Mistake("one kWh's emissions: a MWh is 1,000 kWh", lambda: _co2_kg_per_mwh() / 1000)),
    unit="kg",
))
register("07.ssd_lives", Exercise(
    "Fractions of one 3.84 TB enterprise NVMe drive's rated endurance (1 drive write per day for 5 years) used "
    "by writing 16 bytes per parameter per step for 10,000 steps of a 7-billion-parameter model?",
    _ssd_lives,
    0.02,
    ("Endurance is how many bytes the drive may absorb in its life: its capacity, written once a day, for 5 years.",
     "bytes written = 7e9 x 16 x 10,000; endurance = 1 x 3,840 GB x 365 x 5 (in bytes); divide."),
    lambda: f"{_ssd_lives():.2f} drive lifetimes: offload to SSD wears drives out, so spread it over many.",
    (Mistake("one year of drive writes taken as the endurance: the rating is for 5 years", lambda: 5 * _ssd_lives()),
     Mistake("the drive's capacity taken as its endurance: it may be written once a day for 5 years",
             _one_drive_write_lives)),
    unit="fraction",
))
