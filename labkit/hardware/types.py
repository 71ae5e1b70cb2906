"""The hardware catalogue's types: GPUs, memory and storage tiers, links, hosts, clusters, and lookups.

Every figure is already in bytes, seconds, FLOP/s and watts (``hardware_parse`` converts the
file's units once). GB means 1e9 bytes here, GiB 2**30.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from labkit.errors import LabkitError, require_positive

GB = 1e9
_UNITS = {"B": 1, "KB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12, "PB": 1e15}
_UNITS |= {"KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40, "PiB": 2**50}
LINK_KINDS = ("pcie", "nvlink", "infiniband", "ethernet", "omnipath")
HOST_KINDS = ("server", "workstation", "cloud")


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
    usable_bytes: int = 0  # what torch can allocate (total_memory): measured, or the catalogue's rule; 0 = unknown
    usable_source: str = ""  # where usable_bytes comes from (a measurement, or the rule applied)

    @property
    def usable_memory_bytes(self) -> int:
        """Bytes a process can hold on this GPU, what fit margins are judged against: torch's ``total_memory``
        where measured (the H200's 150.11 GB beside nvidia-smi's 150.75 GB), else by the catalogue's rule."""
        return self.usable_bytes or self.memory_bytes

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
    channels: int = 0  # DRAM channels behind read/write bandwidth (one socket); 0 when not given


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
    """The machine GPUs sit in: its CPUs, its DRAM, its NVMe drives and its network ports.

    A DGX-class server, a workstation with one consumer card, or a cloud VM: plans run on a host,
    and offload to DRAM or NVMe is judged against this host's capacity and bandwidth. ``dram`` and
    ``nvme`` name catalogue tiers (speed, power, endurance); the counts and the total DRAM are the
    host's own, from its datasheet.
    """

    name: str
    aliases: tuple[str, ...]
    cpu: str
    sockets: int
    cores: int  # per socket
    tdp_watts: float  # per socket
    source: str
    note: str = ""
    kind: str = "server"  # one of HOST_KINDS
    gpus: tuple[str, ...] = ()  # catalogue GPUs this host is built with
    gpu_slots: int = 8
    dram_bytes: int = 0  # all the host's DRAM (0: not given)
    dram: str = ""  # a [[memory]] tier: its bandwidth per socket and power
    nvme: str = ""  # a [[storage]] tier: one data drive
    nvme_drives: int = 0
    network: str = ""  # a [[link]] between hosts, "" for none
    network_ports: int = 0
    dram_channels: int = 0  # all sockets' DRAM channels; 0: the tier's channels on every socket
    nvlink_domain_gpus: int = 0  # GPUs one NVLink/NVSwitch domain joins in this host; 0: the GPU's own figure

    @property
    def power_watts(self) -> float:
        """All sockets at TDP: the most the CPUs of one server draw."""
        return self.sockets * self.tdp_watts

    def dram_bandwidth(self, dram: Tier) -> float:
        """Bytes per second the host's DRAM reads: its channels at ``dram``'s per-channel rate."""
        if self.dram_channels and dram.channels:
            return self.dram_channels * dram.read_bandwidth / dram.channels
        return self.sockets * dram.read_bandwidth


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

    def hosts_for(self, gpu_name: str) -> list[Host]:
        """The hosts built with this GPU (by its catalogue name), in file order."""
        name = self.gpu(gpu_name).name
        return [h for h in self.hosts if name in h.gpus]
