"""Energy of a training step as a sum of named parts: compute, GPU idle, HBM, links, host, DRAM, SSD.

Two ways to count joules, both used here:

* device power x time: a busy GPU draws its board power (TDP), an idle one a fraction
  of it (``IDLE_FRACTION``, an assumption stated below), and the host CPUs the same
  way over the share of the step they compute (the CPU optimizer step of ZeRO-Offload);
* data movement: bytes x 8 x joules per bit, per tier and link. Links and HBM take
  their pJ/bit from the hardware catalogue; DRAM and SSD take active power over
  streaming bandwidth (W / (B/s) = J/B), which for DDR5-4800 gives about 20 pJ/bit,
  the figure Han et al.'s table gives for a DRAM access (NeurIPS 2015, Figure 1, after Horowitz,
  ISSCC 2014: 640 pJ per 32-bit read at 45 nm).

The GPU's board power already includes its HBM, so the ``compute`` part is the board
energy less the HBM traffic energy: the parts add up to what the machines draw, and
``Energy.total_j`` is their sum (``tests/test_economics_energy.py`` checks it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from labkit import hardware
from labkit.economics.grid import joules_to_kwh
from labkit.errors import LabkitError
from labkit.references import section

# Assumption: an idle (stalled) GPU or CPU draws 10% of its TDP; an idle H100 SXM reads
# roughly 60-100 W in nvidia-smi against its 700 W TDP. A parameter everywhere it is used.
IDLE_FRACTION = 0.1
PARTS = ("compute", "gpu_idle", "hbm", "link", "host", "dram", "ssd")


def _non_negative(name: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise LabkitError(f"{name} must be a non-negative number (got {value!r})")
    return float(value)


def _fraction(name: str, value: float) -> float:
    if not 0 <= _non_negative(name, value) <= 1:
        raise LabkitError(f"{name} must be between 0 and 1 (got {value!r})")
    return float(value)


def average_power_w(peak_w: float, busy_fraction: float, idle_fraction: float = IDLE_FRACTION) -> float:
    """Mean draw of a device busy ``busy_fraction`` of the time: idle + busy * (peak - idle)."""
    peak = _non_negative("peak_w", peak_w)
    busy, idle = _fraction("busy_fraction", busy_fraction), _fraction("idle_fraction", idle_fraction)
    return peak * (idle + (1 - idle) * busy)


def movement_j(nbytes: float, j_per_bit: float) -> float:
    """Joules to move ``nbytes`` at ``j_per_bit``: 8 bits per byte."""
    return _non_negative("nbytes", nbytes) * 8 * _non_negative("j_per_bit", j_per_bit)


def gpu_memory_j_per_bit(device: hardware.Device) -> float:
    """The GPU memory's access energy from the catalogue (``memory_energy_pj_per_bit``)."""
    if device.memory_energy_j_per_bit is None:
        have = [g.name for g in hardware.load_catalogue().gpus if g.memory_energy_j_per_bit is not None]
        raise LabkitError(f"gpu must be one with memory_energy_pj_per_bit in the catalogue: {', '.join(have)} "
                          f"(got {device.name!r})")
    return device.memory_energy_j_per_bit


def link_j_per_bit(link: hardware.Link) -> float:
    """A link's energy per bit from the catalogue (``energy_pj_per_bit``)."""
    if link.energy_j_per_bit is None:
        have = [li.name for li in hardware.load_catalogue().links if li.energy_j_per_bit is not None]
        raise LabkitError(f"link must be one with energy_pj_per_bit in the catalogue: {', '.join(have)} "
                          f"(got {link.name!r})")
    return link.energy_j_per_bit


def tier_j_per_bit(tier: hardware.Tier, direction: str = "read") -> float:
    """Active power over streaming bandwidth: the energy per bit of a DRAM, SSD or HDD while it streams."""
    if direction not in ("read", "write"):
        raise LabkitError(f"direction must be one of read, write (got {direction!r})")
    bandwidth = tier.read_bandwidth if direction == "read" else tier.write_bandwidth
    return tier.power_watts / (8 * bandwidth)


def han_pj() -> dict[str, float]:
    """45 nm energies, pJ: fp32 add and multiply, 32-bit reads of an 8 KB SRAM and of DRAM.

    Han et al., Learning both Weights and Connections, NeurIPS 2015, Figure 1 (after Horowitz, ISSCC 2014,
    whose own table gives 64-bit cache and DRAM accesses)."""
    return {k: float(v) for k, v in section("energy_pj").items() if k != "source"}


def dram_read_over_fma() -> float:
    """How many fp32 multiply-adds one 32-bit DRAM read costs: 640 / (0.9 + 3.7), about 139 (Han et al. 2015)."""
    pj = han_pj()
    return pj["dram_read_32bit"] / (pj["fp32_add"] + pj["fp32_multiply"])


@dataclass(frozen=True)
class Energy:
    """Joules by named part; ``total_j`` is their sum, ``kwh`` the same in kWh (IT energy, before PUE)."""

    parts_j: dict[str, float] = field(hash=False)

    @property
    def total_j(self) -> float:
        return math.fsum(self.parts_j.values())

    @property
    def kwh(self) -> float:
        return joules_to_kwh(self.total_j)

    def scaled(self, factor: float) -> Energy:
        """The same parts times ``factor`` (a step times the number of steps)."""
        k = _non_negative("factor", factor)
        return Energy({name: j * k for name, j in self.parts_j.items()})

    def facility_j(self, pue: float) -> float:
        """Energy the site draws: IT energy x PUE (PUE >= 1)."""
        if _non_negative("pue", pue) < 1:
            raise LabkitError(f"pue must be at least 1 (got {pue!r})")
        return self.total_j * pue


@dataclass(frozen=True)
class Rates:
    """Watts and joules per bit of one machine type, from the catalogue (see ``rates``)."""

    gpu_w: float
    host_w: float  # all sockets of one server
    hbm_j_per_bit: float
    pcie_j_per_bit: float
    peer_j_per_bit: float  # GPU to GPU (NVLink, else PCIe)
    dram_j_per_bit: float
    ssd_read_j_per_bit: float
    ssd_write_j_per_bit: float
    idle_fraction: float = IDLE_FRACTION


def rates(gpu: str, host: str = "dgx-h100-host", dram: str = "DDR5-4800", ssd: str = "NVMe-PCIe4",
          idle_fraction: float = IDLE_FRACTION) -> Rates:
    """Look every rate up in the hardware catalogue by name."""
    cat = hardware.load_catalogue()
    dev, dram_tier, ssd_tier = cat.gpu(gpu), cat.tier(dram), cat.tier(ssd)
    for name, tier, kind in (("dram", dram_tier, ("dram",)), ("ssd", ssd_tier, ("ssd", "hdd"))):
        if tier.kind not in kind:
            raise LabkitError(f"{name} must be one of {', '.join(cat.tier_names(kind[0]))} (got {tier.name!r})")
    return Rates(
        gpu_w=dev.tdp_watts, host_w=cat.host(host).power_watts, hbm_j_per_bit=gpu_memory_j_per_bit(dev),
        pcie_j_per_bit=link_j_per_bit(cat.link(dev.pcie)),
        peer_j_per_bit=link_j_per_bit(cat.link(dev.nvlink or dev.pcie)),
        dram_j_per_bit=tier_j_per_bit(dram_tier), ssd_read_j_per_bit=tier_j_per_bit(ssd_tier, "read"),
        ssd_write_j_per_bit=tier_j_per_bit(ssd_tier, "write"), idle_fraction=_fraction("idle_fraction", idle_fraction),
    )  # fmt: skip


@dataclass(frozen=True)
class StepTraffic:
    """What one training step does, summed over all GPUs and servers: seconds busy and bytes moved."""

    gpus: int
    hosts: int
    busy_s: float  # GPU computing
    stall_s: float  # GPU waiting for a transfer or the CPU (exposed time)
    host_busy_s: float  # CPU optimizer step, per server
    hbm_bytes: float
    pcie_bytes: float  # GPU <-> host
    peer_bytes: float  # GPU <-> GPU
    dram_bytes: float
    ssd_read_bytes: float
    ssd_write_bytes: float

    @property
    def step_s(self) -> float:
        return self.busy_s + self.stall_s


def step_energy(t: StepTraffic, r: Rates) -> Energy:
    """Energy of one step by part (joules): the GPU board split into compute and HBM, idle, links, host, DRAM, SSD."""
    for name in ("busy_s", "stall_s", "host_busy_s", "hbm_bytes", "pcie_bytes", "peer_bytes", "dram_bytes",
                 "ssd_read_bytes", "ssd_write_bytes", "gpus", "hosts"):
        _non_negative(name, getattr(t, name))
    if t.host_busy_s > t.step_s:
        raise LabkitError(f"host_busy_s must be at most the step, {t.step_s:g} s (got {t.host_busy_s!r})")
    board = t.gpus * r.gpu_w * t.busy_s
    hbm = movement_j(t.hbm_bytes, r.hbm_j_per_bit)
    if hbm > board:
        raise LabkitError(f"hbm_bytes imply {hbm:.3g} J, more than the GPUs' board energy {board:.3g} J: "
                          "check the bytes or the busy time")
    busy = t.host_busy_s / t.step_s if t.step_s else 0.0
    parts = {
        "compute": board - hbm,
        "gpu_idle": t.gpus * r.gpu_w * r.idle_fraction * t.stall_s,
        "hbm": hbm,
        "link": movement_j(t.pcie_bytes, r.pcie_j_per_bit) + movement_j(t.peer_bytes, r.peer_j_per_bit),
        "host": t.hosts * average_power_w(r.host_w, busy, r.idle_fraction) * t.step_s,
        "dram": movement_j(t.dram_bytes, r.dram_j_per_bit),
        "ssd": movement_j(t.ssd_read_bytes, r.ssd_read_j_per_bit)
        + movement_j(t.ssd_write_bytes, r.ssd_write_j_per_bit),
    }
    return Energy(parts)
