"""Near-data computing: run the optimizer step where the optimizer states live.

Adam on P parameters in mixed precision keeps K = 12 bytes of states per parameter (fp32
master weights and two moments) beside 2-byte weights and gradients (ZeRO's accounting,
Rajbhandari et al., SC 2020). When the states live off the GPU (host DRAM, or an SSD as in
ZeRO-Infinity), there are two ways to step:

* ``standard``: bring the states to the GPU (K*P bytes in), step there, send them back (K*P out);
* ``near-data``: send the gradients to the states (2P), step where they live, send the
  updated 16-bit weights back (2P): ZeRO-Offload's CPU Adam (Ren et al., USENIX ATC 2021)
  for DRAM, a computational SSD for flash.

Adam is memory-bound: a fused step reads the gradient and the states and writes the states
and the 16-bit weights, grad + 2K + weight = 28 bytes per parameter, for about
``ADAM_FLOPS_PER_PARAM`` FLOPs, so its time is the roofline's bytes over the bandwidth of
the memory it runs next to (Williams et al., CACM 2009). Near-data moves 4P instead of 2KP
over the link and pays with a slower memory: it wins when the link is slow enough,
``break_even_bandwidth``. Energy is bytes x 8 x J/bit per place: links and HBM from the
catalogue, DRAM from Han et al.'s table (NeurIPS 2015, Figure 1, after Horowitz, ISSCC 2014:
640 pJ per 32-bit DRAM read = 20 pJ/bit), flash from the SSD's active power over its read or
write bandwidth (an assumption, stated on the function): a copy into the drive is a write,
at the drive's write bandwidth and write energy; a copy out of it a read.
"""

from __future__ import annotations

from dataclasses import dataclass

from labkit import hardware
from labkit.errors import LabkitError, require_choice, require_positive
from labkit.measure import optimizer_bytes, unique_bytes
from labkit.references import section
from labkit.rig.model import count_parameters
from labkit.rig.step import StepHooks, training_step

STATES_AT = ("dram", "ssd")
ADAM_FLOPS_PER_PARAM = 12  # assumption: moments (4), bias-corrected update (6), weight decay (2)
HOST_FLOPS = 2e12  # assumption: fp32 FLOP/s of a server's CPUs on a vectorised Adam (ZeRO-Offload's CPU Adam)
PJ = 1e-12


def dram_j_per_bit() -> float:
    """640 pJ per 32-bit DRAM read, per bit (Han et al. 2015, Figure 1, after Horowitz 2014; ``references.toml``)."""
    return section("energy_pj")["dram_read_32bit"] * PJ / 32


def ssd_j_per_bit(ssd: hardware.Tier, direction: str = "read") -> float:
    """Assumption: a flash access costs the drive's active power over its read or write bandwidth (W / (bit/s))."""
    require_choice("direction", direction, ("read", "write"))
    return ssd.power_watts / ((ssd.read_bandwidth if direction == "read" else ssd.write_bandwidth) * 8)


@dataclass(frozen=True)
class Leg:
    """One part of a path: bytes over a link or through a memory, its seconds and joules."""

    what: str
    place: str
    nbytes: int
    seconds: float
    joules: float


@dataclass(frozen=True)
class StepPath:
    """One way to run the optimizer step: its legs in order, run one after another."""

    name: str
    legs: tuple[Leg, ...]

    @property
    def seconds(self) -> float:
        return sum(leg.seconds for leg in self.legs)

    @property
    def joules(self) -> float:
        return sum(leg.joules for leg in self.legs)

    @property
    def link_bytes(self) -> int:
        """Bytes that crossed a link (PCIe, NVMe), not a memory's own traffic."""
        return sum(leg.nbytes for leg in self.legs if leg.what.startswith("move"))


@dataclass(frozen=True)
class NearData:
    """Standard and near-data paths for one placement of the states, side by side."""

    params: int
    states_at: str
    standard: StepPath
    near: StepPath

    @property
    def speedup(self) -> float:
        return self.standard.seconds / self.near.seconds

    @property
    def winner(self) -> str:
        return "near-data" if self.near.seconds < self.standard.seconds else "standard"

    def rows(self) -> list[tuple]:
        """(path, what, place, bytes, seconds, joules) for every leg, then one total per path."""
        out = []
        for p in (self.standard, self.near):
            out += [(p.name, g.what, g.place, g.nbytes, g.seconds, g.joules) for g in p.legs]
            out.append((p.name, "total", "", p.link_bytes, p.seconds, p.joules))
        return out


def adam_bytes_touched(params: int, state_bytes: int = 12, grad_bytes: int = 2, weight_bytes: int = 2) -> int:
    """Bytes a fused Adam step reads and writes: the gradient, the states twice, the 16-bit weights once.

    With fp32 training (no master copy) pass state_bytes=12 counting the fp32 weights with the
    moments, and weight_bytes=0: 4 + 24 = 28 bytes per parameter, the same as mixed precision.
    """
    require_positive("params", params)
    return params * (grad_bytes + 2 * state_bytes + weight_bytes)


def _copy(what: str, nbytes: int, places: list[tuple[str, float, float, float]]) -> Leg:
    """A DMA copy through ``places`` (name, B/s, latency s, J/bit): the slowest sets the pace, all pay energy."""
    seconds = sum(p[2] for p in places) + nbytes / min(p[1] for p in places)
    return Leg(what, " -> ".join(p[0] for p in places), nbytes, seconds, nbytes * 8 * sum(p[3] for p in places))


def adam_paths(params: int, states_at: str = "dram", gpu: str = "H100-SXM", dram: str = "DDR5-4800",
               ssd: str = "NVMe-PCIe4", link_bandwidth: float | None = None,
               ssd_internal_bandwidth: float | None = None, host_flops: float = HOST_FLOPS,
               state_bytes: int = 12, grad_bytes: int = 2, weight_bytes: int = 2) -> NearData:
    """Both paths for Adam on ``params`` parameters whose states live at ``states_at``.

    A copy streams through every place on its way (memory, PCIe, the drive's interface) at
    the slowest one's bandwidth and pays every one's energy; the legs of a path run one
    after another. ``link_bandwidth`` (B/s) overrides the link between the states and the
    GPU: the GPU's PCIe for DRAM, the drive's interface for an SSD (whose copies to the
    GPU bounce through DRAM in the standard path and go peer to peer in the near-data one).
    ``ssd_internal_bandwidth`` is what a computational SSD's engine reads inside the drive:
    no published figure is assumed, it defaults to the drive's read bandwidth (writes at its
    write bandwidth), the case of an engine that sees no more than the host does.
    The GPU end of each copy is not charged (both paths have one).
    """
    require_positive("params", params)
    require_choice("states_at", states_at, STATES_AT)
    for name, value in (("state_bytes", state_bytes), ("grad_bytes", grad_bytes), ("weight_bytes", weight_bytes)):
        require_positive(name, value)
    require_positive("host_flops", host_flops, integer=False)
    dev, host, drive = hardware.gpu(gpu), hardware.tier(dram), hardware.tier(ssd)
    if host.kind != "dram" or drive.kind != "ssd":
        raise LabkitError(f"dram must be a DRAM tier and ssd an SSD tier (got {host.kind!r}, {drive.kind!r})")
    if link_bandwidth is not None:
        require_positive("link_bandwidth", link_bandwidth, integer=False)
    inside = drive.read_bandwidth if ssd_internal_bandwidth is None else ssd_internal_bandwidth
    require_positive("ssd_internal_bandwidth", inside, integer=False)
    pcie = hardware.link(dev.pcie)
    if pcie.energy_j_per_bit is None:
        raise LabkitError(f"gpu must have a PCIe link with energy_pj_per_bit in the catalogue (got {dev.name!r})")
    pcie_bw = link_bandwidth if link_bandwidth is not None and states_at == "dram" else pcie.bandwidth
    drive_bw = link_bandwidth if link_bandwidth is not None and states_at == "ssd" else drive.read_bandwidth
    drive_write_bw = link_bandwidth if link_bandwidth is not None and states_at == "ssd" else drive.write_bandwidth
    link = (pcie.name, pcie_bw, pcie.latency_s, pcie.energy_j_per_bit)
    mem = (host.name, host.read_bandwidth, host.latency_s, dram_j_per_bit())
    flash = (drive.name, drive_bw, drive.latency_s, ssd_j_per_bit(drive, "read"))
    flash_in = (f"{drive.name} write", drive_write_bw, drive.latency_s, ssd_j_per_bit(drive, "write"))
    states, grads, weights = params * state_bytes, params * grad_bytes, params * weight_bytes
    touched = adam_bytes_touched(params, state_bytes, grad_bytes, weight_bytes)
    flops = ADAM_FLOPS_PER_PARAM * params
    hbm_j = dev.memory_energy_j_per_bit or 0.0
    gpu_step = Leg("step", f"{dev.name} HBM", touched, hardware.roofline_time(flops, touched, dev, "fp32"),
                   touched * 8 * hbm_j)
    home, back = ([flash, mem], [mem, flash_in]) if states_at == "ssd" else ([mem], [mem])
    std = [_copy("move states in", states, [*home, link]), gpu_step,
           _copy("move states out", states, [link, *back])]
    if states_at == "dram":
        step = Leg("step", host.name, touched, max(touched / host.read_bandwidth, flops / host_flops),
                   touched * 8 * dram_j_per_bit())
        near = [_copy("move gradients", grads, [link, mem]), step, _copy("move weights back", weights, [mem, link])]
    else:
        reads, writes = grads + states, states + weights
        step = Leg("step", f"{drive.name} (computational)", touched, reads / inside + writes / drive.write_bandwidth,
                   8 * (reads * ssd_j_per_bit(drive, "read") + writes * ssd_j_per_bit(drive, "write")))
        near = [_copy("move gradients", grads, [link, flash_in]), step,
                _copy("move weights back", weights, [flash, link])]
    return NearData(params, states_at, StepPath("standard", tuple(std)), StepPath("near-data", tuple(near)))


def break_even_bandwidth(states_at: str = "dram", **kw) -> float:
    """The link bandwidth (B/s) below which near-data wins: where both paths take equal time.

    Both times are a + b / B in the link bandwidth B (latency terms in a), so the crossing is
    B* = (b_standard - b_near) / (a_near - a_standard); :func:`adam_paths` at two bandwidths gives a and b.
    """
    params = kw.pop("params", 10**9)
    lo, hi = (adam_paths(params, states_at, link_bandwidth=bw, **kw) for bw in (1e9, 2e9))
    slopes, heights = [], []
    for p_lo, p_hi in ((lo.standard, hi.standard), (lo.near, hi.near)):
        b = (p_lo.seconds - p_hi.seconds) / (1 / 1e9 - 1 / 2e9)
        slopes.append(b)
        heights.append(p_lo.seconds - b / 1e9)
    if heights[1] <= heights[0]:
        return float("inf")
    return (slopes[0] - slopes[1]) / (heights[1] - heights[0])


def sweep(params: int, states_at: str, bandwidths: list[float], **kw) -> list[tuple[float, float, float, str]]:
    """(link B/s, standard seconds, near-data seconds, winner) for each bandwidth."""
    out = []
    for bw in bandwidths:
        r = adam_paths(params, states_at, link_bandwidth=bw, **kw)
        out.append((bw, r.standard.seconds, r.near.seconds, r.winner))
    return out


@dataclass(frozen=True)
class MeasuredAdam:
    """A real Adam step on the tiny GPT: bytes read off the optimizer and the model beside the formula."""

    params: int
    state_bytes: int  # measured from the optimizer's state tensors (plus fp32 weights when they are the master)
    grad_bytes: int
    weight_bytes: int  # the model's weights the step writes
    formula_state_bytes: int
    standard_link_bytes: int  # 2 x states
    near_link_bytes: int  # gradients out + weights back
    touched_bytes: int  # a fused step: gradients + 2 x states + 16-bit weights
    formula_touched_bytes: int

    def rows(self) -> list[tuple[str, int, int]]:
        """(quantity, measured bytes, formula bytes)."""
        return [("optimizer states", self.state_bytes, self.formula_state_bytes),
                ("bytes a fused step touches", self.touched_bytes, self.formula_touched_bytes),
                ("link bytes, standard", self.standard_link_bytes, 2 * self.formula_state_bytes),
                ("link bytes, near-data", self.near_link_bytes, self.grad_bytes + self.weight_bytes)]


def measure_adam(trainer, step: int | None = None) -> MeasuredAdam:
    """Run one real step of ``trainer`` (Adam on the CPU) and read what the step must touch.

    fp32 (``torch.optim.AdamW``): the fp32 weights are the master, so the states are weights +
    two moments (12 B/param) and no separate weight copy is written. bf16-mixed
    (``MasterWeightAdamW``): master + moments (12 B/param) and 2-byte weights and gradients.
    """
    params, read = list(trainer.model.parameters()), []
    training_step(trainer, step, StepHooks(after_backward=lambda _: read.append(unique_bytes(p.grad for p in params))))
    grads = read[0]
    states, _ = optimizer_bytes(trainer.optimizer)
    n, weights = count_parameters(trainer.model), unique_bytes(params)
    mixed = trainer.cfg.precision == "bf16-mixed"
    if not mixed:
        states += weights  # the fp32 weights are the master copy the step updates
    copy = weights if mixed else 0  # the 16-bit copy a mixed step writes
    return MeasuredAdam(n, states, grads, weights, 12 * n, 2 * states, grads + weights, grads + 2 * states + copy,
                        adam_bytes_touched(n, 12, grads // n, copy // n))
