"""The machine a plan runs on: GPUs in hosts of the catalogue, with each host's DRAM, NVMe and network.

A GPU is installed in a host (``datasets/hardware.toml``, ``[[host]]``): a DGX A100 or H100, a
cloud VM, a workstation with one consumer card. The host sets how many GPUs share a node (and
NVLink), the network between nodes, and what offload can use: its DRAM (capacity and the
channels' bandwidth) and its NVMe data drives (count, capacity, bandwidth). Without a host named,
the first catalogue host built with the GPU is used.

``headroom`` is the share of each GPU's memory a plan leaves free: the CUDA context, the caching
allocator's fragmentation and the kernels' workspaces (cuBLAS, NCCL buffers) take memory that no
model counts. 10% is the default, an assumption (PyTorch's allocator documentation describes the
fragmentation it can leave; the CUDA context alone takes several hundred MB).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from labkit import hardware
from labkit.economics import grid
from labkit.errors import LabkitError, require_positive
from labkit.hardware import Cluster, Host, Link, Tier
from labkit.predict.profiles import DEFAULT_FRAMEWORK, PROFILES, Profile, profile

DEFAULT_HEADROOM = 0.10


@dataclass(frozen=True)
class Machine:
    """A cluster of one host model: the GPUs, the host's CPUs, DRAM and NVMe drives, and the grid."""

    cluster: Cluster
    host: Host
    dram: Tier
    ssd: Tier | None
    headroom: float = DEFAULT_HEADROOM
    region: str = "world"
    pue: str = "industry-average"
    network_ports: int = 0  # network ports per host; 0: the host's own (one when the catalogue gives none)
    profile: Profile = PROFILES[DEFAULT_FRAMEWORK]  # the framework the plan runs under (``profiles``)

    @property
    def ports(self) -> int:
        """Network ports of one host: the override, else the catalogue host's, else one."""
        return self.network_ports or self.host.network_ports or 1

    @property
    def usable_fraction(self) -> float:
        return 1.0 - self.headroom

    @property
    def usable_bytes(self) -> float:
        """Bytes a plan may use on one GPU: what torch can allocate of it (``Device.usable_memory_bytes``:
        measured where the catalogue has it, else the stated rule) less the headroom."""
        return self.cluster.device.usable_memory_bytes * self.usable_fraction

    @property
    def ssds_per_server(self) -> int:
        return self.host.nvme_drives if self.ssd is not None else 0

    @property
    def dram_bytes(self) -> float:
        """All the DRAM of one host (``dram_gb`` of the catalogue, or the tier's per-socket size x sockets)."""
        return self.host.dram_bytes or self.host.sockets * self.dram.capacity_bytes

    @property
    def dram_bandwidth(self) -> float:
        return self.host.dram_bandwidth(self.dram)

    @property
    def nvme_bytes(self) -> float:
        return self.ssds_per_server * (self.ssd.capacity_bytes if self.ssd else 0)

    def limits(self) -> str:
        """The host's limits in words, for a plan that breaks them."""
        drives = (f"{self.ssds_per_server} x {self.ssd.capacity_bytes / 1e12:g} TB NVMe" if self.ssd else "no NVMe")
        return (f"{self.host.name}: {self.cluster.gpus_per_node} x {self.cluster.device.name} per host, "
                f"{self.dram_bytes / 1e9:,.0f} GB DRAM, {drives}")


def _host_for(cat: hardware.Catalogue, gpu: str, host: str | None) -> Host:
    if host is not None:
        h = cat.host(host)
        if h.gpus and cat.gpu(gpu).name not in h.gpus:
            raise LabkitError(f"host must be one built with {cat.gpu(gpu).name}: {h.name} holds {', '.join(h.gpus)} "
                              f"(got {host!r})")
        return h
    hosts = cat.hosts_for(gpu)
    if not hosts:
        names = ", ".join(f"{h.name} ({'/'.join(h.gpus)})" for h in cat.hosts if h.gpus)
        raise LabkitError(f"gpu {cat.gpu(gpu).name} is in no catalogue host: pass host, one of {names}")
    return hosts[0]


def machine(gpu: str, gpus: int, gpus_per_node: int | None = None, inter_node: str | None = None,
            host: str | None = None, dram: str | None = None, ssd: str | None = None,
            headroom: float = DEFAULT_HEADROOM, region: str = "world", network_ports: int | None = None,
            framework: str = DEFAULT_FRAMEWORK, calibration: object | None = None,
            overrides: dict | None = None) -> Machine:
    """``gpus`` GPUs of the catalogue in hosts of the catalogue (``host``, or the first built with ``gpu``).

    ``gpus_per_node`` defaults to the host's GPU slots (fewer when ``gpus`` is smaller); ``dram``,
    ``ssd``, ``inter_node`` (a network link of the catalogue) and ``network_ports`` (ports per host)
    override the host's own tiers and network; ``framework`` names the software profile (``profiles``).
    ``calibration`` (a ``labkit.hardware.calibration.Calibration``, measured on the machine) replaces the
    catalogue device by ``calibration.device(device)`` and the profile's host dispatch (or launch) by
    ``calibration.launch_s`` (``Profile.measured_launch``).
    ``overrides`` changes single assumptions of the profile (``assumptions.OVERRIDES``).
    """
    from labkit.advisor import assumptions

    prof = assumptions.apply(profile(framework), overrides)
    if calibration is not None:
        prof = prof.measured_launch(calibration.launch_s)
    require_positive("gpus", gpus)
    if not (isinstance(headroom, (int, float)) and 0 <= headroom < 1):
        raise LabkitError(f"headroom must be a fraction in [0, 1) of GPU memory kept free (got {headroom!r})")
    cat = hardware.load_catalogue()
    h = _host_for(cat, gpu, host)
    slots = h.gpu_slots
    if gpus_per_node is not None:
        require_positive("gpus_per_node", gpus_per_node)
        if gpus_per_node > slots:
            raise LabkitError(f"gpus_per_node must be at most the {slots} GPU slots of host {h.name} "
                              f"(got {gpus_per_node})")
    node = min(gpus, gpus_per_node or slots)
    if gpus % node:
        raise LabkitError(f"gpus must be a multiple of gpus_per_node={node} (got {gpus})")
    if inter_node is not None:
        kinds = [k for k in hardware.LINK_KINDS if k not in ("pcie", "nvlink")]
        names = [lk.name for lk in cat.links if lk.kind in kinds]
        if cat.link(inter_node).kind not in kinds:
            raise LabkitError(f"network must be a link between hosts: one of {', '.join(names)} (got {inter_node!r})")
    if network_ports is not None:
        require_positive("network_ports", network_ports)
        if network_ports > 64:
            raise LabkitError(f"network_ports must be a positive integer of at most 64 per host (got {network_ports})")
    net = inter_node or (h.network if h.network != "none" else "")
    if gpus > node and not net:
        raise LabkitError(f"gpus must be at most {node} on host {h.name}: it has no network between hosts "
                          f"({h.note or 'none in the catalogue'}) (got {gpus})")
    cl = hardware.cluster(cat.gpu(gpu).name, node, gpus // node, net or "ib-hdr", cat)
    if calibration is not None:
        # measured rates in place of the datasheet's; the catalogue name kept, so prices and energy figures apply
        cl = replace(cl, device=replace(calibration.device(cl.device), name=cl.device.name))
    grid.region(region)
    dram_tier = cat.tier(dram or h.dram or "DDR4-3200")
    ssd_name = ssd or h.nvme
    return Machine(cl, h, dram_tier, cat.tier(ssd_name) if ssd_name else None, float(headroom), region,
                   network_ports=network_ports or 0, profile=prof)


def network_link(mc: Machine) -> Link:
    """The link between hosts (only used when a group spans hosts)."""
    return mc.cluster.inter_node
