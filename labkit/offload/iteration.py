"""One training iteration as a sequence of layer operations, replayed in ``labkit.sim``.

Written by hand: no library simulates swap plans. The shared model behind the
SwapAdvisor, FlashNeuron and Mobius comparisons of notebook 04. An iteration is a
list of :class:`Op` (forward seconds, backward seconds, bytes the op saves for
backward). A :class:`Plan` says which ops' activations leave the device after
their forward and how early they come back before their backward, to host DRAM
(over PCIe) or to an SSD, either directly (GPU <-> SSD, FlashNeuron, Bae et al.,
FAST 2021) or through a host bounce buffer (two hops). Streams: "compute", "d2h",
"h2d", "disk", each in program order (``labkit.sim.simulate``).

Memory: an op's activation is allocated when its forward starts, freed when the
hop that leaves the device ends, allocated again when the hop that returns to the
device starts, and freed when its backward ends. Frees at an instant come before
allocations at the same instant. Gradients and kernel workspace are not modelled
(put them in ``resident_bytes``).
"""

from __future__ import annotations

from dataclasses import dataclass

from labkit.errors import LabkitError, require_choice, require_positive
from labkit.hardware import Link, Tier, gpu, link, tier, transfer_time
from labkit.predict.activation_terms import activation_terms
from labkit.shapes import ModelShape
from labkit.sim import Task, Timeline, simulate

TARGETS = ("host", "disk")
PATHS = ("direct", "bounce")
STREAMS = ("compute", "d2h", "h2d", "disk")


@dataclass(frozen=True)
class Op:
    """One layer operation: forward and backward seconds, and the bytes it saves for backward."""

    name: str
    fwd_s: float
    bwd_s: float
    act_bytes: float


@dataclass(frozen=True)
class Machine:
    """A device of ``capacity_bytes``, of which ``resident_bytes`` are always taken, a host link and a disk."""

    capacity_bytes: float
    resident_bytes: float
    host_link: Link
    disk: Tier | None = None


@dataclass(frozen=True)
class Plan:
    """Per op: swap its activation out (``swap``), prefetch it ``ahead`` backward ops early (>= 1), and ``sync``.

    ``sync[i]``: the forward of op i + 1 waits until op i's activation has left the device (vDNN's
    synchronisation, Rhu et al., MICRO 2016, and FlashNeuron's): without it compute runs ahead of a slow
    link and swapped activations pile up on the device, so the plan saves no memory. A single bool applies
    to every op (it is stored as a tuple).
    """

    swap: tuple[bool, ...]
    ahead: tuple[int, ...]
    target: str = "host"
    path: str = "direct"
    sync: bool | tuple[bool, ...] = False

    def __post_init__(self) -> None:
        if isinstance(self.sync, bool):
            object.__setattr__(self, "sync", (self.sync,) * len(self.swap))
        else:
            object.__setattr__(self, "sync", tuple(bool(x) for x in self.sync))

    @classmethod
    def none(cls, n: int, target: str = "host", path: str = "direct") -> Plan:
        return cls((False,) * n, (1,) * n, target, path)


@dataclass
class Result:
    """The simulated iteration: timeline, seconds, peak device bytes (resident included), bytes moved."""

    timeline: Timeline
    time_s: float
    peak_bytes: float
    bytes_moved: float


def machine(gpu_name: str, resident_bytes: float, capacity_bytes: float | None = None,
            disk: str | None = "NVMe-PCIe4") -> Machine:
    """A catalogue GPU with its own PCIe link; ``capacity_bytes`` overrides the card's memory (e.g. 16 GB V100)."""
    dev = gpu(gpu_name)
    cap = dev.memory_bytes if capacity_bytes is None else require_positive("capacity_bytes", capacity_bytes,
                                                                           integer=False)
    if resident_bytes < 0:
        raise LabkitError(f"resident_bytes must be >= 0 (got {resident_bytes!r})")
    return Machine(float(cap), float(resident_bytes), link(dev.pcie), None if disk is None else tier(disk))


def transformer_ops(shape: ModelShape, seq: int, batch: int, peak_flops: float, mfu: float = 0.5,
                    act_bytes: int = 2) -> list[Op]:
    """Two ops per layer (attention, MLP) from Korthikanti et al.'s terms and Narayanan et al.'s FLOPs.

    Backward is 2x forward (Narayanan et al., SC 2021). ``mfu`` is the share of peak reached.
    """
    require_positive("mfu", mfu, integer=False)
    s, b, h, f, kv = seq, batch, shape.hidden, shape.ffn_size, shape.kv_hidden
    attn_flops = 2 * s * b * (h * (h + 2 * kv) + h * h) + 4 * b * s * s * h
    mlp_flops = 2 * s * b * (3 if shape.gated else 2) * h * f
    terms = activation_terms(shape, seq, batch, act_bytes=act_bytes)
    attn_bytes = sum(t.bytes for t in terms if t.role == "ln_1" or t.role.startswith("attn"))
    mlp_bytes = sum(t.bytes for t in terms) - attn_bytes
    rate = peak_flops * mfu
    ops = []
    for layer in range(shape.layers):
        for part, fl, nb in (("attn", attn_flops, attn_bytes), ("mlp", mlp_flops, mlp_bytes)):
            ops.append(Op(f"L{layer}.{part}", fl / rate, 2 * fl / rate, float(nb)))
    return ops


def _hops(nbytes: float, m: Machine, plan: Plan) -> tuple[list[tuple[str, float]], list[tuple[str, float]]]:
    """(stream, seconds) of the hops out and back; the first hop out leaves the device, the last back lands on it."""
    if plan.target == "host":
        return [("d2h", transfer_time(nbytes, m.host_link))], [("h2d", transfer_time(nbytes, m.host_link))]
    if m.disk is None:
        raise LabkitError("machine.disk must be a storage tier when plan.target is 'disk'")
    d = m.disk
    if plan.path == "direct":  # one hop at the slower of the PCIe link and the SSD (Bae et al., FAST 2021)
        w = d.latency_s + nbytes / min(m.host_link.bandwidth, d.write_bandwidth)
        r = d.latency_s + nbytes / min(m.host_link.bandwidth, d.read_bandwidth)
        return [("disk", w)], [("disk", r)]
    w, r = d.latency_s + nbytes / d.write_bandwidth, d.latency_s + nbytes / d.read_bandwidth
    return ([("d2h", transfer_time(nbytes, m.host_link)), ("disk", w)],
            [("disk", r), ("h2d", transfer_time(nbytes, m.host_link))])


def simulate_iteration(ops: list[Op], m: Machine, plan: Plan) -> Result:
    """Forward ops in order, then backward in reverse; swapped activations move on the copy streams."""
    n = len(ops)
    if len(plan.swap) != n or len(plan.ahead) != n or len(plan.sync) != n:
        raise LabkitError(f"plan.swap, plan.ahead and plan.sync must have one entry per op ({n}), "
                          f"got {len(plan.swap)}, {len(plan.ahead)} and {len(plan.sync)}")
    require_choice("plan.target", plan.target, TARGETS)
    require_choice("plan.path", plan.path, PATHS)
    if any(a < 1 for a in plan.ahead):
        raise LabkitError(f"plan.ahead must be >= 1 for every op (got {min(plan.ahead)})")
    compute, copies = [], []
    for i, op in enumerate(ops):
        wait = (f"out{i - 1}.0",) if i and plan.sync[i - 1] and plan.swap[i - 1] else ()
        compute.append(Task(f"F{i}", "compute", op.fwd_s, wait, "F", {"op": op.name}))
        if plan.swap[i]:
            prev = f"F{i}"
            for k, (stream, dt) in enumerate(_hops(op.act_bytes, m, plan)[0]):
                copies.append(Task(f"out{i}.{k}", stream, dt, (prev,), "offload", {"op": op.name}))
                prev = f"out{i}.{k}"
    for i in reversed(range(n)):
        if plan.swap[i]:
            j = i + plan.ahead[i] + 1  # the prefetch starts when backward of op i + ahead starts
            trigger = f"B{j}" if j < n else f"F{n - 1}"
            back = _hops(ops[i].act_bytes, m, plan)[1]
            prev = f"out{i}.{len(_hops(ops[i].act_bytes, m, plan)[0]) - 1}"
            for k, (stream, dt) in enumerate(back):
                deps = (prev, trigger) if k == 0 else (prev,)
                copies.append(Task(f"in{i}.{k}", stream, dt, deps, "prefetch", {"op": ops[i].name}))
                prev = f"in{i}.{k}"
            deps = (f"in{i}.{len(back) - 1}",) + ((f"B{i + 1}",) if i + 1 < n else ())
        else:
            deps = (f"B{i + 1}",) if i + 1 < n else ()
        compute.append(Task(f"B{i}", "compute", ops[i].bwd_s, deps, "B", {"op": ops[i].name}))
    tl = simulate(compute + copies)
    ev = {e.name: e for e in tl.events}
    changes: list[tuple[float, float]] = []
    moved = 0.0
    for i, op in enumerate(ops):
        changes.append((ev[f"F{i}"].start, op.act_bytes))
        changes.append((ev[f"B{i}"].end, -op.act_bytes))
        if plan.swap[i]:
            changes.append((ev[f"out{i}.0"].end, -op.act_bytes))
            last = max(int(e.split(".")[1]) for e in ev if e.startswith(f"in{i}."))
            changes.append((ev[f"in{i}.{last}"].start, op.act_bytes))
            moved += 2 * op.act_bytes
    live = peak = 0.0
    for _, delta in sorted(changes):
        live += delta
        peak = max(peak, live)
    return Result(tl, tl.makespan, m.resident_bytes + peak, moved)


def compute_time(ops: list[Op]) -> float:
    """The iteration with no transfers at all: the lower bound every plan is measured against."""
    return sum(o.fwd_s + o.bwd_s for o in ops)
