"""Electricity as data: grid carbon intensity, data-centre PUE and a price, from ``datasets/grid.toml``.

The file also holds the embodied carbon of storage (kg CO2e per GB manufactured, from
published life-cycle assessments). Carbon of a run = facility energy (kWh) x the grid's intensity (gCO2e per kWh);
facility energy = IT energy x PUE (The Green Grid, PUE: a comprehensive examination
of the metric, 2012). Intensities are Ember's lifecycle yearly averages; each entry
keeps its source and year, because these figures move every year.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from labkit.errors import LabkitError, read_toml

GRID_FILE = Path(__file__).resolve().parent.parent.parent / "datasets" / "grid.toml"
J_PER_KWH = 3.6e6  # 1 kWh = 1000 W x 3600 s
_KEYS = {"region": "g_co2_per_kwh", "pue": "pue", "price": "usd_per_kwh", "embodied": "kg_co2_per_gb"}


@dataclass(frozen=True)
class Figure:
    """One named figure of the grid file (an intensity, a PUE or a price) with its source and year."""

    kind: str  # "region", "pue", "price" or "embodied"
    name: str
    aliases: tuple[str, ...]
    value: float  # gCO2e/kWh, PUE, USD/kWh, or kg CO2e per GB of storage made
    year: int
    source: str
    note: str = ""


def _norm(name: Any) -> str:
    return str(name).strip().lower().replace(" ", "-").replace("_", "-")


def _parse(kind: str, index: int, raw: Any) -> Figure:
    if not isinstance(raw, dict):
        raise LabkitError(f"{kind} entry #{index + 1} must be a table ([[{kind}]])")
    label, key = f"{kind} {raw.get('name', f'#{index + 1}')!r}", _KEYS[kind]
    allowed = {"name", "aliases", key, "year", "source", "note"}
    for k in raw:
        if k not in allowed:
            raise LabkitError(f"{label}: {k} is not a known field (allowed: {', '.join(sorted(allowed))})")
    for k in ("name", "source"):
        if not isinstance(raw.get(k), str) or not raw[k].strip():
            raise LabkitError(f"{label}: {k} must be a non-empty string")
    value, year = raw.get(key), raw.get("year")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise LabkitError(f"{label}: {key} must be a non-negative number (got {value!r})")
    if kind == "pue" and value < 1:
        raise LabkitError(f"{label}: pue must be at least 1 (got {value!r})")
    if isinstance(year, bool) or not isinstance(year, int) or not 1990 <= year <= 2100:
        raise LabkitError(f"{label}: year must be a year such as 2023 (got {year!r})")
    return Figure(kind, raw["name"], tuple(raw.get("aliases", [])), float(value), year, raw["source"],
                  str(raw.get("note", "")))


@lru_cache(maxsize=4)
def load_grid(path: str | None = None) -> tuple[Figure, ...]:
    """Every figure of the grid file, checked field by field (the default file is read once)."""
    where = Path(path) if path else GRID_FILE
    data = read_toml(where, "grid file")
    for section in data:
        if section not in _KEYS:
            raise LabkitError(f"grid file section must be one of {', '.join(_KEYS)} (got {section!r})")
    return tuple(_parse(kind, i, raw) for kind in _KEYS for i, raw in enumerate(data.get(kind, [])))


def names(kind: str, path: str | None = None) -> list[str]:
    """Names of the regions, PUE figures or prices, in file order."""
    return [f.name for f in load_grid(path) if f.kind == kind]


def figure(kind: str, name: str, path: str | None = None) -> Figure:
    """A figure by name or alias (case-insensitive); a miss names the field and lists the names."""
    field = {"region": "region", "pue": "pue", "price": "electricity price", "embodied": "embodied tier"}[kind]
    for f in load_grid(path):
        if f.kind == kind and _norm(name) in {_norm(n) for n in (f.name, *f.aliases)}:
            return f
    raise LabkitError(f"{field} must be one of {', '.join(names(kind, path))} (got {name!r})")


def region(name: str) -> Figure:
    """A grid region: ``region("france").value`` is gCO2e per kWh."""
    return figure("region", name)


def pue(name: str = "industry-average") -> float:
    """A data centre's PUE by name: 1.58 is the 2023 industry average (Uptime Institute)."""
    return figure("pue", name).value


def electricity_usd_per_kwh(name: str = "us-industrial") -> float:
    """An electricity price by name, USD per kWh."""
    return figure("price", name).value


def embodied_kg_per_gb(tier: str) -> float:
    """kg CO2e to manufacture one GB (1e9 bytes) of ``tier`` ("ssd", "hdd"), from a published LCA."""
    return figure("embodied", tier).value


def joules_to_kwh(joules: float) -> float:
    return joules / J_PER_KWH


def kwh_to_joules(kwh: float) -> float:
    return kwh * J_PER_KWH


def carbon_kg(energy_j: float, g_co2_per_kwh: float) -> float:
    """kg CO2e of ``energy_j`` joules drawn from a grid at ``g_co2_per_kwh`` (facility energy, PUE included)."""
    for name, value in (("energy_j", energy_j), ("g_co2_per_kwh", g_co2_per_kwh)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            raise LabkitError(f"{name} must be a non-negative number (got {value!r})")
    return joules_to_kwh(energy_j) * g_co2_per_kwh / 1000.0
