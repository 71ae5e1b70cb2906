"""FlashNeuron: activations to an SSD, chosen offline so the transfers hide behind compute.

Bae et al., "FlashNeuron: SSD-Enabled Large-Batch Training of Very Deep Neural
Networks", FAST 2021, let the GPU write activations straight to an NVMe SSD
(peer-to-peer DMA, no host bounce buffer) and pick, offline from the first
iteration, which tensors to offload so that the copies overlap compute. This
module replays that in ``labkit.offload.iteration`` (written by hand; no library
models it): for a batch size, offload tensors greedily, largest first, keeping
each only if the simulated iteration stays within ``slack`` of the compute-only
time, until the peak fits the device; then search the largest batch that fits,
beside the largest batch with no offload. The two-hop path (GPU -> host DRAM ->
SSD) is the baseline FlashNeuron replaces.

Assumptions (stated, not fudged): model states (16 bytes per parameter with
bf16/fp16 mixed precision and Adam, ZeRO SC 2020) and the activations outside the
transformer layers (embedding, final norm, fp32 logits) stay on the device; the
layer ops are those of ``transformer_ops`` at ``mfu`` of peak; gradients and
workspace are not modelled; FlashNeuron's compression of offloaded tensors is not
modelled. The paper's 12.4-14.0x is for its models and a 16 GB V100; the ratio here
is what this model gives, shown beside it. The MFU is fixed, so a larger batch never runs
the GPU more efficiently here: the paper's throughput gain, which comes from that (and
from compression), cannot appear; what the rule buys here is batch size, at a time cost
of at most ``slack``.

Capacities: ``V100_16GB`` is the card's true 16 GiB (a "16 GB" V100 holds 16 x 2**30 B,
the lab's convention for GPU memory); ``Report.capacity_gb`` prints it in 1e9 bytes.

Where the rule stops (:func:`hiding`): an activation written out hides behind the forward
of the layers after it, one read back behind the backward, so at most
min(forward seconds x write bandwidth, backward seconds x read bandwidth) bytes can move
without a stall, the bandwidth being the slower of the GPU's PCIe and the SSD. Both the
compute and the activations grow in proportion to the batch, so that share does not
depend on the batch: if it is small, no batch gains.
"""

from __future__ import annotations

from dataclasses import dataclass

from labkit.errors import LabkitError, require_positive
from labkit.hardware import gpu
from labkit.offload.iteration import Machine, Plan, Result, compute_time, machine, simulate_iteration, transformer_ops
from labkit.predict.estimate import activation_bytes_outside_layers, model_state_bytes
from labkit.references import headline
from labkit.shapes import ModelShape

AHEAD = 2
V100_16GB = 16 * 2**30  # the paper's card, at its true capacity


@dataclass(frozen=True)
class Hiding:
    """How much of an iteration's activations can move to the SSD behind compute, for one batch."""

    compute_fwd_s: float
    compute_bwd_s: float
    act_bytes: float
    write_bps: float  # min(PCIe, SSD write): the direct path's speed
    read_bps: float

    @property
    def share(self) -> float:
        """The largest share of the activations whose writes and reads both hide (1.0 = all)."""
        return min(1.0, self.compute_fwd_s * self.write_bps / self.act_bytes,
                   self.compute_bwd_s * self.read_bps / self.act_bytes)

    @property
    def needed_bps(self) -> float:
        """The direct-path bandwidth at which every activation would hide (write and read)."""
        return max(self.act_bytes / self.compute_fwd_s, self.act_bytes / self.compute_bwd_s)


def hiding(shape: ModelShape, seq: int, batch: int, gpu_name: str = "V100-32GB", disk: str = "NVMe-PCIe4",
           mfu: float = 0.5) -> Hiding:
    """Compute seconds and activation bytes of the layers, and the direct path's speed (see the module docstring)."""
    require_positive("batch", batch)
    m = _machine(shape, seq, batch, gpu_name, None, disk)
    ops = transformer_ops(shape, seq, batch, gpu(gpu_name).peak_flops["bf16"], mfu)
    assert m.disk is not None
    return Hiding(sum(o.fwd_s for o in ops), sum(o.bwd_s for o in ops), sum(o.act_bytes for o in ops),
                  min(m.host_link.bandwidth, m.disk.write_bandwidth), min(m.host_link.bandwidth, m.disk.read_bandwidth))


@dataclass(frozen=True)
class Offline:
    """The offline choice for one batch: the plan, its simulated result, and whether it fits and keeps the slack."""

    batch: int
    plan: Plan | None
    result: Result | None
    compute_s: float

    @property
    def fits(self) -> bool:
        return self.result is not None

    @property
    def overhead(self) -> float:
        """Extra iteration time over compute only (0.1 = 10% slower)."""
        return float("nan") if self.result is None else self.result.time_s / self.compute_s - 1


@dataclass(frozen=True)
class Report:
    """Largest batch without offload and with it, throughput of each, and the paper's headline beside them."""

    gpu: str
    capacity_gb: float
    path: str
    slack: float
    batch_no_offload: int
    batch_offload: int
    throughput_no_offload: float  # samples per second
    throughput_offload: float
    overhead: float  # iteration-time overhead at batch_offload
    published: str

    @property
    def batch_ratio(self) -> float:
        return self.batch_offload / self.batch_no_offload if self.batch_no_offload else float("inf")


def _machine(shape: ModelShape, seq: int, batch: int, gpu_name: str, capacity_bytes: float | None,
             disk: str) -> Machine:
    states = sum(model_state_bytes(shape.params, "bf16-mixed").values())
    return machine(gpu_name, states + activation_bytes_outside_layers(shape, seq, batch), capacity_bytes, disk)


def choose_offline(shape: ModelShape, seq: int, batch: int, gpu_name: str = "V100-32GB",
                   capacity_bytes: float | None = V100_16GB, disk: str = "NVMe-PCIe4", path: str = "direct",
                   slack: float = 0.1, mfu: float = 0.5) -> Offline:
    """FlashNeuron's offline selection: largest tensors first, each kept only if time stays within the slack."""
    require_positive("batch", batch)
    if slack < 0:
        raise LabkitError(f"slack must be >= 0 (got {slack!r})")
    m = _machine(shape, seq, batch, gpu_name, capacity_bytes, disk)
    ops = transformer_ops(shape, seq, batch, gpu(gpu_name).peak_flops["bf16"], mfu)
    base = compute_time(ops)
    swap = [False] * len(ops)
    res = simulate_iteration(ops, m, Plan(tuple(swap), (AHEAD,) * len(ops), "disk", path, True))
    if res.peak_bytes <= m.capacity_bytes:
        return Offline(batch, Plan(tuple(swap), (AHEAD,) * len(ops), "disk", path, True), res, base)
    if m.resident_bytes > m.capacity_bytes:
        return Offline(batch, None, None, base)
    for i in sorted(range(len(ops)), key=lambda k: (-ops[k].act_bytes, k)):
        swap[i] = True
        plan = Plan(tuple(swap), (AHEAD,) * len(ops), "disk", path, True)
        trial = simulate_iteration(ops, m, plan)
        if trial.time_s > (1 + slack) * base:
            swap[i] = False
            continue
        if trial.peak_bytes <= m.capacity_bytes:
            return Offline(batch, plan, trial, base)
    return Offline(batch, None, None, base)


def largest_batch(fits, limit: int = 4096) -> int:
    """The largest b in 1..limit with fits(b), by doubling then bisection (fits is taken as monotone)."""
    if not fits(1):
        return 0
    lo, hi = 1, 2
    while hi <= limit and fits(hi):
        lo, hi = hi, hi * 2
    hi = min(hi, limit + 1)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo


def compare(shape: ModelShape, seq: int, gpu_name: str = "V100-32GB", capacity_bytes: float | None = V100_16GB,
            disk: str = "NVMe-PCIe4", path: str = "direct", slack: float = 0.1, mfu: float = 0.5) -> Report:
    """Largest batch and throughput without offload and with FlashNeuron's offline offload to the SSD."""
    kw = dict(gpu_name=gpu_name, capacity_bytes=capacity_bytes, disk=disk, path=path, mfu=mfu)
    plain = largest_batch(lambda b: choose_offline(shape, seq, b, slack=0.0, **kw).plan is not None
                          and not any(choose_offline(shape, seq, b, slack=0.0, **kw).plan.swap))
    off = largest_batch(lambda b: choose_offline(shape, seq, b, slack=slack, **kw).fits)
    a = choose_offline(shape, seq, plain, slack=0.0, **kw) if plain else None
    b = choose_offline(shape, seq, off, slack=slack, **kw) if off else None
    cap = capacity_bytes if capacity_bytes is not None else gpu(gpu_name).memory_bytes
    return Report(gpu_name, cap / 1e9, path, slack, plain, off,
                  plain / a.result.time_s if a and a.result else 0.0,
                  off / b.result.time_s if b and b.result else 0.0,
                  b.overhead if b else float("nan"), headline("FlashNeuron")["claim"])


def slack_sweep(shape: ModelShape, seq: int, slacks: tuple[float, ...] = (0.1, 0.5, 1.0, 3.0, 10.0),
                **kw) -> list[Report]:
    """:func:`compare` at each allowed slowdown: what giving up the rule (hiding behind compute) buys."""
    return [compare(shape, seq, slack=s, **kw) for s in slacks]
