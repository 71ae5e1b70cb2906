"""Reading ``datasets/hardware.toml``: each entry checked field by field, its units converted once.

A bad entry fails with a message naming the section, the entry and the field, and the values
allowed; unknown fields are refused, except documentary ones (``*_source``, ``*_date``,
``*_note``). File units: GB (1e9 bytes), GB/s, TFLOPS, us, ns, W.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any, NoReturn

from labkit.errors import LabkitError, read_toml, require_choice
from labkit.hardware.types import (
    GB,
    HOST_KINDS,
    LINK_KINDS,
    Catalogue,
    Device,
    Host,
    Link,
    Tier,
    _find,
    _norm,
    _number,
)

_SECTIONS = ("gpu", "link", "memory", "storage", "host")
_BASE = {"name", "aliases", "source", "note"}
_PRICE = {"price_date", "price_source"}
_KEYS = {
    "gpu": _BASE | _PRICE | {"memory_gb", "memory_type", "memory_bandwidth_gbps",
                             "nvlink", "pcie", "tdp_w", "price_usd", "cloud_usd_per_hour",
                             "memory_energy_pj_per_bit", "memory_mib", "memory_mib_source",
                             "usable_bytes", "usable_bytes_source",
                             "nvlink_domain_gpus", "nvlink_domain_source"},
    "link": _BASE | {"kind", "bandwidth_gbps", "bandwidth_total_gbps", "latency_us",
                     "energy_pj_per_bit"},
    "tier": _BASE | _PRICE | {"kind", "capacity_gb", "read_gbps", "write_gbps", "latency_ns",
                              "latency_us", "price_usd_per_gb", "power_w", "endurance_tbw",
                              "channels", "channel_bandwidth_gbps", "dwpd", "warranty_years",
                              "drive_class", "endurance_source"},
    "host": _BASE | {"cpu", "sockets", "tdp_w", "cores", "kind", "gpus", "gpu_slots", "dram_gb", "dram",
                     "nvme", "nvme_drives", "network", "network_ports", "dram_channels",
                     "nvlink_domain_gpus"},
}  # fmt: skip


class _Entry:
    """One raw TOML table, with checks whose errors name the entry and the field."""

    def __init__(self, section: str, index: int, raw: Any, keys: set[str]) -> None:
        if not isinstance(raw, dict):
            raise LabkitError(f"{section} entry #{index + 1} must be a table ([[{section}]])")
        name = raw.get("name")
        if not isinstance(name, str) or not name.strip():
            raise LabkitError(f"{section} entry #{index + 1}: name must be a non-empty string")
        self.raw, self.label = raw, f"{section} {name!r}"
        for key in raw:
            documentary = key.endswith(("_source", "_date", "_note"))
            if key not in keys and not documentary and not key.startswith("peak_tflops_"):
                self.fail(key, f"is not a known field (allowed: {', '.join(sorted(keys))})")
        self.text("source")

    def fail(self, key: str, why: str) -> NoReturn:
        raise LabkitError(f"{self.label}: {key} {why}")

    def text(self, key: str) -> str:
        value = self.raw.get(key)
        if not isinstance(value, str) or not value.strip():
            self.fail(key, "must be a non-empty string" + ("" if key in self.raw else " (missing)"))
        return value

    def aliases(self) -> tuple[str, ...]:
        value = self.raw.get("aliases", [])
        if not isinstance(value, list) or not all(isinstance(a, str) and a for a in value):
            self.fail("aliases", "must be a list of non-empty strings")
        return tuple(value)

    def opt(self, key: str, *, zero_ok: bool = False) -> float | None:
        value = self.raw.get(key)
        return None if value is None else _number(f"{self.label}: {key}", value, zero_ok)

    def req(self, key: str, *, zero_ok: bool = False) -> float:
        if key not in self.raw:
            self.fail(key, "is missing")
        return _number(f"{self.label}: {key}", self.raw[key], zero_ok)

    def dated(self, key: str, prefix: str = "") -> float | None:
        """A price must say when and where it was seen: prices drift fast."""
        value = self.opt(key, zero_ok=True)
        if value is not None:
            self.text(f"{prefix}price_date"), self.text(f"{prefix}price_source")
        return value


def _link_name(e: _Entry, key: str, links: tuple[Link, ...], extra: str = "") -> str:
    return _find(key, links, e.text(key), where=f"{e.label}: ", extra=extra).name


def _parse_gpu(e: _Entry, links: tuple[Link, ...]) -> Device:
    e.req("peak_tflops_bf16"), e.req("peak_tflops_fp32"), e.req("price_usd", zero_ok=True)
    no_nvlink = e.text("nvlink").strip().lower() == "none"
    energy = e.opt("memory_energy_pj_per_bit")
    if energy is not None:
        e.text("memory_energy_source")
    flops = {k.removeprefix("peak_tflops_"): e.req(k) * 1e12 for k in e.raw if k.startswith("peak_tflops_")}
    mib = e.opt("memory_mib")
    if mib is not None:
        e.text("memory_mib_source")
    capacity = round(mib * 2**20) if mib is not None else round(e.req("memory_gb") * GB)
    usable = e.opt("usable_bytes")
    if usable is not None:
        e.text("usable_bytes_source")
        if usable != int(usable) or usable > capacity:
            e.fail("usable_bytes", f"must be a whole number of bytes at most the capacity {capacity} (got {usable!r})")
    domain = e.opt("nvlink_domain_gpus")
    if domain is not None:
        e.text("nvlink_domain_source")
        if domain != int(domain) or (no_nvlink and domain != 1):
            e.fail("nvlink_domain_gpus", f"must be a whole number, 1 when nvlink = \"none\" (got {domain!r})")
    return Device(
        name=e.text("name"), aliases=e.aliases(),
        memory_bytes=capacity, usable_bytes=int(usable or 0),
        usable_source=e.text("usable_bytes_source") if usable is not None else "",
        memory_nominal_gb=e.req("memory_gb"), memory_type=e.text("memory_type"),
        memory_bandwidth=e.req("memory_bandwidth_gbps") * GB, peak_flops=flops,
        nvlink=None if no_nvlink else _link_name(e, "nvlink", links, extra="none"),
        pcie=_link_name(e, "pcie", links), tdp_watts=e.req("tdp_w"),
        price_usd=e.dated("price_usd") or 0.0,
        cloud_usd_per_hour=e.dated("cloud_usd_per_hour", prefix="cloud_"),
        source=e.text("source"), note=str(e.raw.get("note", "")),
        memory_energy_j_per_bit=None if energy is None else energy * 1e-12,
        nvlink_domain_gpus=int(domain) if domain is not None else (1 if no_nvlink else 8),
    )  # fmt: skip


def _usable_by_rule(gpus: tuple[Device, ...]) -> tuple[Device, ...]:
    """Every GPU without a measured ``usable_bytes`` gets its capacity less the largest share measured missing
    on another (torch's ``total_memory`` below nvidia-smi's total: the driver's reserve), its source saying so;
    with none measured, the capacity itself."""
    measured = [(g.memory_bytes - g.usable_bytes) / g.memory_bytes for g in gpus if g.usable_bytes]
    share = max(measured, default=0.0)
    names = ", ".join(g.name for g in gpus if g.usable_bytes) or "none measured"
    rule = (f"rule: the capacity less {share:.3%}, the largest share measured missing to torch ({names})"
            if measured else "rule: the capacity (no GPU's usable bytes measured)")
    return tuple(g if g.usable_bytes else replace(g, usable_bytes=round(g.memory_bytes * (1 - share)),
                                                  usable_source=rule) for g in gpus)


def _whole(e: _Entry, key: str, default: int | None = None, zero_ok: bool = False) -> int:
    if key not in e.raw and default is not None:
        return default
    value = e.req(key, zero_ok=zero_ok)
    if value != int(value):
        e.fail(key, f"must be a whole number (got {value!r})")
    return int(value)


def _parse_host(e: _Entry, gpus: tuple[Device, ...], tiers: tuple[Tier, ...], links: tuple[Link, ...]) -> Host:
    kind = str(e.raw.get("kind", "server"))
    if kind not in HOST_KINDS:
        e.fail("kind", f"must be one of {', '.join(HOST_KINDS)} (got {kind!r})")
    names = e.raw.get("gpus", [])
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        e.fail("gpus", "must be a list of catalogue GPU names")
    carried = tuple(_find("gpus", gpus, n, where=f"{e.label}: ").name for n in names)
    drams = tuple(t for t in tiers if t.kind == "dram")
    drives = tuple(t for t in tiers if t.kind != "dram")
    dram = _find("dram", drams, e.text("dram"), where=f"{e.label}: ").name if "dram" in e.raw else ""
    nvme = _find("nvme", drives, e.text("nvme"), where=f"{e.label}: ").name if "nvme" in e.raw else ""
    network = e.raw.get("network", "none")
    net = "" if network == "none" else _find("network", links, e.text("network"), where=f"{e.label}: ",
                                               extra="none").name
    dram_gb = e.opt("dram_gb")
    for key, documented in (("dram_gb", "dram_source"), ("nvme_drives", "nvme_source"), ("network", "network_source"),
                            ("nvlink_domain_gpus", "nvlink_domain_source")):
        if key in e.raw and e.raw[key] != "none":
            e.text(documented)  # every figure of a host says where it comes from
    return Host(
        name=e.text("name"), aliases=e.aliases(), cpu=e.text("cpu"), sockets=_whole(e, "sockets"),
        cores=_whole(e, "cores"), tdp_watts=e.req("tdp_w"), source=e.text("source"),
        note=str(e.raw.get("note", "")), kind=kind, gpus=carried, gpu_slots=_whole(e, "gpu_slots", 8),
        dram_bytes=0 if dram_gb is None else round(dram_gb * GB), dram=dram, nvme=nvme,
        nvme_drives=_whole(e, "nvme_drives", 0, zero_ok=True), network=net,
        network_ports=_whole(e, "network_ports", 0, zero_ok=True),
        dram_channels=_whole(e, "dram_channels", 0, zero_ok=True),
        nvlink_domain_gpus=_whole(e, "nvlink_domain_gpus", 0, zero_ok=True),
    )  # fmt: skip


def _parse_tier(e: _Entry, kinds: tuple[str, ...]) -> Tier:
    kind = e.text("kind")
    if kind not in kinds:
        e.fail("kind", f"must be one of {', '.join(kinds)} (got {kind!r})")
    ns, us = e.opt("latency_ns", zero_ok=True), e.opt("latency_us", zero_ok=True)
    if (ns is None) == (us is None):
        e.fail("latency_ns", "or latency_us must be given, exactly one of them")
    tbw = e.opt("endurance_tbw")
    dwpd, years = e.opt("dwpd"), e.opt("warranty_years")
    drive_class = str(e.raw.get("drive_class", ""))
    if drive_class not in ("", "consumer", "enterprise"):
        e.fail("drive_class", f"must be one of consumer, enterprise (got {drive_class!r})")
    if dwpd is not None and years is None:
        e.fail("warranty_years", "must be given with dwpd (endurance = dwpd x capacity x 365 x years)")
    if tbw is None and dwpd is not None and years is not None:
        tbw = dwpd * e.req("capacity_gb") * 365 * years / 1000
    e.req("price_usd_per_gb", zero_ok=True)
    return Tier(
        name=e.text("name"), aliases=e.aliases(), kind=kind,
        capacity_bytes=round(e.req("capacity_gb") * GB),
        read_bandwidth=e.req("read_gbps") * GB, write_bandwidth=e.req("write_gbps") * GB,
        latency_s=ns * 1e-9 if ns is not None else (us or 0.0) * 1e-6,
        price_usd_per_gb=e.dated("price_usd_per_gb") or 0.0,
        power_watts=e.req("power_w"), endurance_bytes=None if tbw is None else round(tbw * 1e12),
        source=e.text("source"), note=str(e.raw.get("note", "")),
        drive_class=drive_class, dwpd=dwpd, warranty_years=years,
        channels=_whole(e, "channels", 0, zero_ok=True),
    )  # fmt: skip


def _parse_link(e: _Entry) -> Link:
    kind = e.text("kind")
    if kind not in LINK_KINDS:
        e.fail("kind", f"must be one of {', '.join(LINK_KINDS)} (got {kind!r})")
    bandwidth, total = e.req("bandwidth_gbps"), e.opt("bandwidth_total_gbps")
    if total is not None and total < bandwidth:
        e.fail("bandwidth_total_gbps", f"must be >= bandwidth_gbps={bandwidth:g} (got {total:g})")
    energy = e.opt("energy_pj_per_bit")
    if energy is not None:
        e.text("energy_source")
    return Link(
        name=e.text("name"), aliases=e.aliases(), kind=kind, bandwidth=bandwidth * GB,
        latency_s=e.req("latency_us", zero_ok=True) * 1e-6, source=e.text("source"),
        energy_j_per_bit=None if energy is None else energy * 1e-12, note=str(e.raw.get("note", "")),
    )  # fmt: skip


def _check_unique(section: str, items: tuple[Any, ...]) -> None:
    """A copied block that keeps its old name would make lookups ambiguous."""
    seen: dict[str, str] = {}
    for item in items:
        names = {_norm(n): n for n in (item.name, *item.aliases)}
        for key, n in names.items():
            if key in seen:
                raise LabkitError(
                    f"{section} {item.name!r}: name or alias {n!r} is already used by {section} {seen[key]!r}"
                )
        seen |= dict.fromkeys(names, item.name)


def _entries(data: dict[str, Any], section: str, keys: set[str]) -> list[_Entry]:
    tables = data.get(section, [])
    if not isinstance(tables, list):
        raise LabkitError(f"{section} must be an array of tables ([[{section}]])")
    return [_Entry(section, i, raw, keys) for i, raw in enumerate(tables)]


def load(path: Path) -> Catalogue:
    """Read and check one hardware file: every entry's fields, units converted once, names unique."""
    data = read_toml(path, "hardware catalogue")
    for section in data:
        require_choice("hardware catalogue section", section, _SECTIONS)
    links = tuple(_parse_link(e) for e in _entries(data, "link", _KEYS["link"]))
    _check_unique("link", links)
    gpus = _usable_by_rule(tuple(_parse_gpu(e, links) for e in _entries(data, "gpu", _KEYS["gpu"])))
    tiers = tuple(_parse_tier(e, ("dram",)) for e in _entries(data, "memory", _KEYS["tier"]))
    tiers += tuple(_parse_tier(e, ("ssd", "hdd")) for e in _entries(data, "storage", _KEYS["tier"]))
    _check_unique("gpu", gpus)
    _check_unique("tier", tiers)
    hosts = tuple(_parse_host(e, gpus, tiers, links) for e in _entries(data, "host", _KEYS["host"]))
    _check_unique("host", hosts)
    return Catalogue(gpus=gpus, tiers=tiers, links=links, hosts=hosts)
