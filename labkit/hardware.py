"""The hardware model as data: GPUs, memory tiers and links from ``datasets/hardware.toml``.

Figures live in a human-readable file, not in code, so a learner adds their own GPU
by copying a block, and every figure sits next to its source. This module turns the
file's units (GB, GB/s, TFLOPS, us) into bytes, seconds, FLOP/s and watts once, on
load, so no caller ever converts units again; people see units only through
:func:`format_bytes`. GB means 1e9 bytes here, GiB 2**30.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

from labkit.errors import LabkitError, read_toml, require_choice, require_positive

DEFAULT_PATH = Path(__file__).resolve().parent.parent / "datasets" / "hardware.toml"
GB = 1e9
_UNITS = {"B": 1, "KB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12, "PB": 1e15}
_UNITS |= {"KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40, "PiB": 2**50}
_SECTIONS = ("gpu", "link", "memory", "storage", "host")
_BASE = {"name", "aliases", "source", "note"}
_PRICE = {"price_date", "price_source"}
_KEYS = {
    "gpu": _BASE | _PRICE | {"memory_gb", "memory_type", "memory_bandwidth_gbps",
                             "nvlink", "pcie", "tdp_w", "price_usd", "cloud_usd_per_hour",
                             "memory_energy_pj_per_bit", "memory_mib", "memory_mib_source",
                             "nvlink_domain_gpus", "nvlink_domain_source"},
    "link": _BASE | {"kind", "bandwidth_gbps", "bandwidth_total_gbps", "latency_us",
                     "energy_pj_per_bit"},
    "tier": _BASE | _PRICE | {"kind", "capacity_gb", "read_gbps", "write_gbps", "latency_ns",
                              "latency_us", "price_usd_per_gb", "power_w", "endurance_tbw",
                              "channels", "channel_bandwidth_gbps", "dwpd", "warranty_years",
                              "drive_class", "endurance_source"},
    "host": _BASE | {"cpu", "sockets", "tdp_w", "cores"},
}  # fmt: skip
LINK_KINDS = ("pcie", "nvlink", "infiniband", "ethernet")


@dataclass(frozen=True)
class Device:
    """One accelerator: how much it holds, how fast it reads memory and computes."""

    name: str
    aliases: tuple[str, ...]
    memory_bytes: int  # true capacity in bytes (memory_mib * 2**20 where the catalogue gives it)
    memory_type: str
    memory_bandwidth: float  # B/s
    peak_flops: dict[str, float] = field(hash=False)  # dtype -> dense FLOP/s
    nvlink: str | None  # name of a Link, None when the card has no NVLink
    pcie: str  # name of a Link
    tdp_watts: float
    price_usd: float
    cloud_usd_per_hour: float | None
    source: str
    note: str = ""
    memory_energy_j_per_bit: float | None = None  # HBM/GDDR access energy, when the catalogue gives it
    memory_nominal_gb: float = 0.0  # the marketed figure ("80 GB"), kept for published tables that use it
    nvlink_domain_gpus: int = 1  # GPUs that one NVLink/NVSwitch domain joins; 1 without NVLink

    @property
    def memory_nominal_bytes(self) -> int:
        """The marketed capacity read as GB = 1e9 bytes: the convention ZeRO's tables use."""
        return round(self.memory_nominal_gb * GB)


@dataclass(frozen=True)
class Tier:
    """A place bytes can live off the GPU (host DRAM, SSD, HDD): size, speed, cost."""

    name: str
    aliases: tuple[str, ...]
    kind: str  # "dram", "ssd" or "hdd"
    capacity_bytes: int
    read_bandwidth: float  # B/s
    write_bandwidth: float  # B/s
    latency_s: float
    price_usd_per_gb: float  # per GB = 1e9 bytes, as prices are quoted
    power_watts: float
    endurance_bytes: int | None  # bytes that may be written over the warranty
    source: str
    note: str = ""
    drive_class: str = ""  # "consumer" or "enterprise" for drives; "" for DRAM
    dwpd: float | None = None  # drive writes per day over the warranty (enterprise rating)
    warranty_years: float | None = None


@dataclass(frozen=True)
class Link:
    """A wire between two places: per-direction bandwidth plus a fixed latency."""

    name: str
    aliases: tuple[str, ...]
    kind: str  # one of LINK_KINDS
    bandwidth: float  # B/s, per direction
    latency_s: float
    source: str
    energy_j_per_bit: float | None = None
    note: str = ""


@dataclass(frozen=True)
class Host:
    """The CPU side of a GPU server: sockets of one CPU model, each drawing up to its TDP."""

    name: str
    aliases: tuple[str, ...]
    cpu: str
    sockets: int
    cores: int  # per socket
    tdp_watts: float  # per socket
    source: str
    note: str = ""

    @property
    def power_watts(self) -> float:
        """All sockets at TDP: the most the CPUs of one server draw."""
        return self.sockets * self.tdp_watts


def _norm(name: str) -> str:
    return name.strip().lower().replace(" ", "-").replace("_", "-")


def _find(field_name: str, items: tuple[Any, ...], name: str, where: str = "", extra: str = "") -> Any:
    """Case-insensitive lookup over names and aliases; a miss lists the names."""
    key = _norm(name) if isinstance(name, str) else None
    for item in items:
        if key in {_norm(n) for n in (item.name, *item.aliases)}:
            return item
    names = ", ".join([item.name for item in items] + ([extra] if extra else []))
    raise LabkitError(f"{where}{field_name} must be one of {names} (got {name!r})")


def _number(what: str, value: Any, zero_ok: bool = True) -> float:
    """A finite number, >= 0 (or > 0): sizes, rates and times are never negative."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not ok or not math.isfinite(value) or value < 0 or (value == 0 and not zero_ok):
        raise LabkitError(
            f"{what} must be a {'non-negative' if zero_ok else 'positive'} number (got {value!r})"
        )
    return float(value)


@dataclass(frozen=True)
class Catalogue:
    """Everything in one hardware file, with lookups by (case-insensitive) name."""

    gpus: tuple[Device, ...]
    tiers: tuple[Tier, ...]
    links: tuple[Link, ...]
    hosts: tuple[Host, ...] = ()

    def gpu(self, name: str) -> Device:
        return _find("gpu", self.gpus, name)

    def tier(self, name: str) -> Tier:
        return _find("tier", self.tiers, name)

    def link(self, name: str) -> Link:
        return _find("link", self.links, name)

    def gpu_names(self) -> list[str]:
        return [g.name for g in self.gpus]

    def tier_names(self, kind: str | None = None) -> list[str]:
        """Names of all tiers, or only those of one kind ("dram", "ssd", "hdd")."""
        return [t.name for t in self.tiers if kind is None or t.kind == kind]

    def link_names(self) -> list[str]:
        return [li.name for li in self.links]

    def host(self, name: str) -> Host:
        return _find("host", self.hosts, name)

    def host_names(self) -> list[str]:
        return [h.name for h in self.hosts]


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
    domain = e.opt("nvlink_domain_gpus")
    if domain is not None:
        e.text("nvlink_domain_source")
        if domain != int(domain) or (no_nvlink and domain != 1):
            e.fail("nvlink_domain_gpus", f"must be a whole number, 1 when nvlink = \"none\" (got {domain!r})")
    return Device(
        name=e.text("name"), aliases=e.aliases(),
        memory_bytes=round(mib * 2**20) if mib is not None else round(e.req("memory_gb") * GB),
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


def _parse_host(e: _Entry) -> Host:
    counts = {k: e.req(k) for k in ("sockets", "cores")}
    for key, value in counts.items():
        if value != int(value):
            e.fail(key, f"must be a whole number (got {value!r})")
    return Host(
        name=e.text("name"), aliases=e.aliases(), cpu=e.text("cpu"), sockets=int(counts["sockets"]),
        cores=int(counts["cores"]), tdp_watts=e.req("tdp_w"), source=e.text("source"),
        note=str(e.raw.get("note", "")),
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


def _load(path: Path) -> Catalogue:
    data = read_toml(path, "hardware catalogue")
    for section in data:
        require_choice("hardware catalogue section", section, _SECTIONS)
    links = tuple(_parse_link(e) for e in _entries(data, "link", _KEYS["link"]))
    _check_unique("link", links)
    gpus = tuple(_parse_gpu(e, links) for e in _entries(data, "gpu", _KEYS["gpu"]))
    tiers = tuple(_parse_tier(e, ("dram",)) for e in _entries(data, "memory", _KEYS["tier"]))
    tiers += tuple(_parse_tier(e, ("ssd", "hdd")) for e in _entries(data, "storage", _KEYS["tier"]))
    _check_unique("gpu", gpus)
    _check_unique("tier", tiers)
    hosts = tuple(_parse_host(e) for e in _entries(data, "host", _KEYS["host"]))
    _check_unique("host", hosts)
    return Catalogue(gpus=gpus, tiers=tiers, links=links, hosts=hosts)


@functools.lru_cache(maxsize=1)
def _default_catalogue() -> Catalogue:
    return _load(DEFAULT_PATH)


def load_catalogue(path: str | Path | None = None) -> Catalogue:
    """Load a hardware file; the default one is read once and cached, others every call."""
    return _default_catalogue() if path is None else _load(Path(path))


def gpu(name: str) -> Device:
    return load_catalogue().gpu(name)


def tier(name: str) -> Tier:
    return load_catalogue().tier(name)


def link(name: str) -> Link:
    return load_catalogue().link(name)


def host(name: str) -> Host:
    return load_catalogue().host(name)


def transfer_time(nbytes: float, link: Link) -> float:
    """Seconds to move ``nbytes`` one way: latency + size / bandwidth (alpha-beta model).

    Moving nothing costs nothing, so 0 bytes gives 0.0 rather than the latency.
    """
    n = _number("nbytes", nbytes)
    return 0.0 if n == 0 else link.latency_s + n / link.bandwidth


def roofline_time(flops: float, nbytes: float, device: Device, dtype: str = "bf16") -> float:
    """Lower bound on a kernel's time: the slower of computing and reading memory.

    Roofline model, Williams, Waterman and Patterson, CACM 2009: a kernel cannot
    finish before its FLOPs at peak, nor before its bytes at memory bandwidth.
    """
    f, n = _number("flops", flops), _number("nbytes", nbytes)
    require_choice("dtype", dtype, list(device.peak_flops))
    return max(f / device.peak_flops[dtype], n / device.memory_bandwidth)


@dataclass(frozen=True)
class Cluster:
    """Identical nodes of identical GPUs: one fast link inside a node, one between."""

    device: Device
    gpus_per_node: int
    nodes: int
    intra_node: Link
    inter_node: Link

    def __post_init__(self) -> None:
        require_positive("gpus_per_node", self.gpus_per_node)
        require_positive("nodes", self.nodes)

    @property
    def n_gpus(self) -> int:
        return self.gpus_per_node * self.nodes


def cluster(
    gpu_name: str,
    gpus_per_node: int = 8,
    nodes: int = 1,
    inter_node: str = "ib-hdr",
    catalogue: Catalogue | None = None,
) -> Cluster:
    """Build a cluster; GPUs in a node talk over NVLink if the card has it, else PCIe."""
    cat = catalogue or load_catalogue()
    device = cat.gpu(gpu_name)
    intra = cat.link(device.nvlink or device.pcie)
    return Cluster(device, gpus_per_node, nodes, intra, cat.link(inter_node))


def format_bytes(n: float, unit: str = "GB", digits: int = 1) -> str:
    """Bytes for people, with the unit spelt out: GB = 1e9, GiB = 2**30."""
    if isinstance(n, bool) or not isinstance(n, (int, float)) or not math.isfinite(n):
        raise LabkitError(f"n must be a finite number of bytes (got {n!r})")
    require_choice("unit", unit, _UNITS)
    return f"{n / _UNITS[unit]:.{digits}f} {unit}"
