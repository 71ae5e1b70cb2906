"""Money: what a byte costs to hold in each tier, and what GPU time costs to rent or to own.

* $/GB per tier: DRAM, SSD and HDD from the catalogue's ``price_usd_per_gb``; HBM has no
  price of its own, so it is the GPU's price over its memory (the compute comes with it,
  which is the point: HBM capacity is bought one GPU at a time);
* rented: GPU-hours x the catalogue's on-demand ``cloud_usd_per_hour`` (host, DRAM and local
  NVMe come with the instance; electricity is in the price);
* owned: purchase price spread over a service life (straight-line amortisation, an
  assumption: ``LIFETIME_YEARS``), plus electricity at the site (facility kWh x price).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from labkit import hardware
from labkit.errors import LabkitError, read_toml, require_choice

GB = 1e9
HOUR_S = 3600.0
YEAR_S = 365.25 * 24 * HOUR_S
# Assumption: hardware is written off over 4 years; large operators now book servers over
# 5-6 years, while the GPUs' useful frontier life is shorter. A parameter wherever it is used.
LIFETIME_YEARS = 4.0
TIERS = ("hbm", "dram", "ssd", "hdd")


def _non_negative(name: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise LabkitError(f"{name} must be a non-negative number (got {value!r})")
    return float(value)


def usd_per_gb(kind: str, name: str | None = None) -> float:
    """USD per GB (1e9 bytes) of one tier: ``usd_per_gb("hbm", "H100-SXM")``, ``usd_per_gb("ssd")``.

    ``name`` is a GPU for "hbm" (default H100-SXM) and a catalogue tier otherwise (default: the
    first of that kind, DDR4-3200 / NVMe-PCIe4 / HDD-7200rpm).
    """
    require_choice("tier", kind, TIERS)
    cat = hardware.load_catalogue()
    if kind == "hbm":
        dev = cat.gpu(name or "H100-SXM")
        if not dev.price_usd:
            raise LabkitError(f"gpu must be one with a price_usd in the catalogue (got {dev.name!r})")
        return dev.price_usd / (dev.memory_bytes / GB)
    tier = cat.tier(name or cat.tier_names(kind)[0])
    if tier.kind != kind:
        raise LabkitError(f"{kind} tier must be one of {', '.join(cat.tier_names(kind))} (got {tier.name!r})")
    return tier.price_usd_per_gb


def usd_per_gb_basis(kind: str) -> str:
    """What ``usd_per_gb(kind)`` is the price of, in words (HBM: the whole GPU over its memory)."""
    require_choice("tier", kind, TIERS)
    return {"hbm": "whole GPU price / its memory", "dram": "DIMM street price", "ssd": "drive street price",
            "hdd": "drive street price"}[kind]


@dataclass(frozen=True)
class CloudPrice:
    """One GPU's on-demand price per GPU-hour, with the date and the source the catalogue gives."""

    gpu: str
    usd_per_hour: float
    date: str
    source: str


def cloud_prices() -> list[CloudPrice]:
    """Every GPU with a cloud price, with its ``cloud_price_date`` and ``cloud_price_source`` from the catalogue."""
    raw = {e["name"]: e for e in read_toml(hardware.DEFAULT_PATH, "hardware catalogue").get("gpu", [])}
    return [CloudPrice(g.name, g.cloud_usd_per_hour, str(raw[g.name].get("cloud_price_date", "")),
                       str(raw[g.name].get("cloud_price_source", "")))
            for g in hardware.load_catalogue().gpus if g.cloud_usd_per_hour is not None and g.name in raw]


def holding_cost_usd(nbytes: float, kind: str, name: str | None = None) -> float:
    """Purchase cost of the capacity that holds ``nbytes`` in one tier (no partial-device rounding)."""
    return _non_negative("nbytes", nbytes) / GB * usd_per_gb(kind, name)


def gpu_hours(n_gpus: int, seconds: float) -> float:
    return _non_negative("n_gpus", n_gpus) * _non_negative("seconds", seconds) / HOUR_S


def cloud_usd(n_gpus: int, seconds: float, gpu: str, usd_per_hour: float | None = None) -> float:
    """Renting ``n_gpus`` for ``seconds`` on demand: GPU-hours x the hourly price (the catalogue's by default)."""
    dev = hardware.gpu(gpu)
    rate = dev.cloud_usd_per_hour if usd_per_hour is None else _non_negative("usd_per_hour", usd_per_hour)
    if rate is None:
        have = [g.name for g in hardware.load_catalogue().gpus if g.cloud_usd_per_hour is not None]
        raise LabkitError(f"gpu must be one with a cloud_usd_per_hour in the catalogue: {', '.join(have)} "
                          f"(got {dev.name!r}); or pass usd_per_hour")
    return gpu_hours(n_gpus, seconds) * rate


def amortised_usd(capex_usd: float, seconds: float, lifetime_years: float = LIFETIME_YEARS) -> float:
    """The share of a purchase a run of ``seconds`` uses up: capex x seconds / service life."""
    if _non_negative("lifetime_years", lifetime_years) == 0:
        raise LabkitError("lifetime_years must be a positive number (got 0)")
    return _non_negative("capex_usd", capex_usd) * _non_negative("seconds", seconds) / (lifetime_years * YEAR_S)


def electricity_usd(kwh: float, usd_per_kwh: float) -> float:
    """What the site pays for ``kwh`` of facility energy."""
    return _non_negative("kwh", kwh) * _non_negative("usd_per_kwh", usd_per_kwh)
