"""The figures behind the costs: every price, power, energy and carbon figure has a source and a date."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from labkit import hardware
from labkit.economics import capital, grid, wear
from labkit.errors import LabkitError

ROOT = Path(__file__).resolve().parent.parent
YEAR = re.compile(r"\b(19[89]\d|20\d\d)\b")
# figure key -> the prefix of its own *_source / *_date keys
FIGURES = {"tdp_w": "power", "power_w": "power", "price_usd": "price", "price_usd_per_gb": "price",
           "cloud_usd_per_hour": "cloud_price", "energy_pj_per_bit": "energy",
           "memory_energy_pj_per_bit": "memory_energy", "endurance_tbw": "endurance"}


def _entries(path: Path):
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    return [(section, e) for section, items in data.items() for e in items]


def test_every_hardware_cost_power_and_energy_figure_has_a_source_and_a_date():
    checked = 0
    for section, entry in _entries(ROOT / "datasets" / "hardware.toml"):
        for key, prefix in FIGURES.items():
            if key not in entry:
                continue
            source = entry.get(f"{prefix}_source") or entry.get("source")
            assert isinstance(source, str) and source.strip(), (section, entry["name"], key)
            dated = entry.get(f"{prefix}_date") or YEAR.search(source) or YEAR.search(entry["source"])
            assert dated, f"{section} {entry['name']}: {key} has no date"
            checked += 1
    assert checked >= 30


def test_every_grid_figure_has_a_source_and_a_year():
    entries = _entries(ROOT / "datasets" / "grid.toml")
    assert {s for s, _ in entries} == {"region", "pue", "price", "embodied"}
    for _section, entry in entries:
        assert entry["source"].strip() and 1990 <= entry["year"] <= 2100, entry
    figures = grid.load_grid()
    assert len(figures) == len(entries)
    assert grid.region("France").value == 56 and grid.region("world").value == 481
    assert grid.pue() == 1.58 and grid.pue("hyperscale") < grid.pue()
    assert grid.electricity_usd_per_kwh() == pytest.approx(0.0806)
    assert grid.embodied_kg_per_gb("ssd") == 0.16 and grid.embodied_kg_per_gb("hdd") == 0.02  # Tannu & Nair 2022


def test_regions_span_clean_to_dirty_grids():
    values = {n: grid.region(n).value for n in grid.names("region")}
    assert min(values, key=values.get) == "norway" and max(values, key=values.get) == "india"


@pytest.mark.parametrize("body, message", [
    ('[[region]]\nname = "x"\ng_co2_per_kwh = -1\nyear = 2023\nsource = "s"', "g_co2_per_kwh must be a non-negative"),
    ('[[region]]\nname = "x"\ng_co2_per_kwh = 1\nsource = "s"', "year must be a year"),
    ('[[region]]\nname = "x"\ng_co2_per_kwh = 1\nyear = 2023', "source must be a non-empty string"),
    ('[[region]]\nname = "x"\ng_co2 = 1\nyear = 2023\nsource = "s"', "g_co2 is not a known field"),
    ('[[pue]]\nname = "x"\npue = 0.8\nyear = 2023\nsource = "s"', "pue must be at least 1"),
    ('[[regions]]\nname = "x"', "section must be one of region, pue, price"),
    ("not toml [", "is not valid TOML"),
])  # fmt: skip
def test_bad_grid_files_name_the_field(tmp_path, body, message):
    path = tmp_path / "grid.toml"
    path.write_text(body)
    with pytest.raises(LabkitError, match=message):
        grid.load_grid(str(path))


def test_unknown_names_list_the_allowed_values():
    with pytest.raises(LabkitError, match="region must be one of world, united-states, .*norway"):
        grid.region("mars")
    with pytest.raises(LabkitError, match="pue must be one of industry-average, hyperscale, ideal"):
        grid.pue("cave")
    with pytest.raises(LabkitError, match="tier must be one of hbm, dram, ssd, hdd"):
        capital.usd_per_gb("tape")
    with pytest.raises(LabkitError, match="host must be one of dgx-a100-host, .*dgx-h100-host"):
        hardware.host("laptop")


def test_hosts_and_memory_energy_load_from_the_catalogue(tmp_path):
    h = hardware.host("dgx-h100-host")
    assert (h.sockets, h.cores, h.tdp_watts, h.power_watts) == (2, 56, 350, 700)
    assert hardware.gpu("H100-SXM").memory_energy_j_per_bit == pytest.approx(4e-12)
    assert hardware.link("nvlink4").energy_j_per_bit == pytest.approx(1.3e-12)
    bad = (ROOT / "datasets" / "hardware.toml").read_text().replace("sockets = 2", "sockets = 1.5", 1)
    path = tmp_path / "hw.toml"
    path.write_text(bad)
    with pytest.raises(LabkitError, match="host 'dgx-a100-host': sockets must be a whole number"):
        hardware.load_catalogue(path)
    nosrc = (ROOT / "datasets" / "hardware.toml").read_text().replace("memory_energy_source =", "x_note =", 1)
    path.write_text(nosrc)
    with pytest.raises(LabkitError, match="memory_energy_source must be a non-empty string"):
        hardware.load_catalogue(path)


def test_price_per_gb_orders_the_tiers():
    """HBM (through the GPU's price) costs hundreds of times DRAM per GB, DRAM tens of times SSD, SSD > HDD."""
    hbm, dram, ssd, hdd = (capital.usd_per_gb(k) for k in capital.TIERS)
    assert hbm == pytest.approx(30000 / (81559 * 2**20 / 1e9))  # the H100's true capacity, 81,559 MiB
    assert dram == 2.5 and ssd == 0.08 and hdd == 0.018
    assert hbm > 100 * dram > dram > 10 * ssd > ssd > hdd
    assert capital.holding_cost_usd(2e12, "ssd") == pytest.approx(160.0)
    assert capital.gpu_hours(8, 3600) == 8.0
    assert capital.cloud_usd(8, 7200, "H100-SXM") == pytest.approx(8 * 2 * 12.29)  # AWS p5.48xlarge / 8
    assert capital.amortised_usd(1000, capital.YEAR_S, lifetime_years=4) == pytest.approx(250)
    with pytest.raises(LabkitError, match="gpu must be one with a cloud_usd_per_hour"):
        capital.cloud_usd(1, 3600, "RTX-4090")


def test_ssd_wear_by_hand():
    w = wear.ssd_wear(2.5 * 1200e12, drives=1, drive="NVMe-PCIe4")
    assert w.life_used == pytest.approx(2.5) and w.replacements == 2
    assert w.replacement_usd == pytest.approx(2 * 2000 * 0.08)
    assert wear.ssd_wear(1200e12, drives=1, drive="NVMe-PCIe4").replacements == 0  # one life: no replacement
    assert wear.ssd_wear(2 * 1200e12, drives=4, drive="NVMe-PCIe4").life_used == pytest.approx(0.5)
    dgx = wear.ssd_wear(7008e12)  # the default: a DGX's 3.84 TB data drive, 1 DWPD over 5 years
    assert dgx.drive == "NVMe-U2-3.84TB" and dgx.life_used == pytest.approx(1.0)
    with pytest.raises(LabkitError, match="drive must be one with endurance_tbw"):
        wear.ssd_wear(1.0, drive="hdd")
    with pytest.raises(LabkitError, match="drives must be a positive integer"):
        wear.ssd_wear(1.0, drives=0)


@settings(max_examples=50, deadline=None)
@given(written=st.floats(0, 1e18), more=st.floats(1e9, 1e18), drives=st.integers(1, 64))
def test_more_bytes_written_means_more_wear(written, more, drives):
    low, high = wear.ssd_wear(written, drives), wear.ssd_wear(written + more, drives)
    assert high.life_used > low.life_used and high.replacements >= low.replacements


@settings(max_examples=50, deadline=None)
@given(joules=st.floats(1.0, 1e15), g=st.floats(0, 1000), cleaner=st.floats(0.01, 0.99))
def test_cleaner_grid_less_carbon(joules, g, cleaner):
    assert grid.carbon_kg(joules, g * cleaner) <= grid.carbon_kg(joules, g)
    assert grid.carbon_kg(joules * 2, g) == pytest.approx(2 * grid.carbon_kg(joules, g))
