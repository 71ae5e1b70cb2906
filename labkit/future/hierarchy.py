"""Multi-level storage and data orchestration: a real training trace replayed on HBM / DRAM / SSD.

``labkit.future.trace.record_trace`` records one real step of the tiny GPT, op by op: the
weights each op reads, the storages autograd saves and reads back, and each op's FLOPs.

``replay`` runs that trace on a three-level hierarchy, in fixed-size pages as a paged
allocator would: HBM (a cache), host DRAM (a cache) and an SSD that backs everything.
A policy is an eviction rule and a fetch rule, the same residency rules otherwise:

* ``lru``: demand fetch when an op needs a page, evict the least recently used page;
* ``trace-aware``: Belady's MIN eviction (evict the page whose next use is furthest;
  Belady, "A study of replacement algorithms for a virtual-storage computer", IBM Systems
  Journal 1966), and every fetch issued as soon as its slot is free, up to ``lookahead``
  ops ahead of its use (prefetch, as vDNN and SwapAdvisor plan from a profiled iteration);
* ``min`` (MIN eviction, demand fetch) and ``lru+prefetch`` (LRU eviction, prefetch) take one
  half each, so ``ablation`` can show what each half of the trace-aware schedule gains.

MIN is optimal in misses for pages of one size, so the trace-aware schedule never
misses more than LRU. Times come from ``labkit.sim``: ops on a compute stream (roofline
time on the GPU), copies on PCIe and NVMe streams (alpha-beta from the catalogue); the
stall is the compute stream's idle time. Written by hand: no library replays a
training trace on a memory hierarchy.
"""

from __future__ import annotations

import heapq
from collections import OrderedDict
from dataclasses import dataclass

from labkit import hardware
from labkit.errors import LabkitError, require_choice, require_positive
from labkit.future.trace import Block, Op, StepTrace, record_trace  # noqa: F401 - record_trace: the notebook's entry
from labkit.sim import Task, simulate

POLICIES = ("lru", "min", "lru+prefetch", "trace-aware")
MIN_EVICTION = ("min", "trace-aware")
PREFETCH = ("lru+prefetch", "trace-aware")
TIERS = ("HBM", "DRAM", "SSD")
LINKS = ("pcie h2d", "pcie d2h", "nvme read", "nvme write")
NEVER = 1 << 62



@dataclass(frozen=True)
class Hierarchy:
    """HBM, host DRAM and an SSD: capacities in bytes (the SSD backs everything), speeds from the catalogue.

    Capacities are counted in whole pages of ``page_bytes``, as a paged allocator holds them.
    """

    hbm_bytes: int
    dram_bytes: int
    page_bytes: int = 4096
    gpu: str = "H100-SXM"
    dram: str = "DDR5-4800"
    ssd: str = "NVMe-PCIe4"

    def __post_init__(self) -> None:
        for name in ("hbm_bytes", "dram_bytes", "page_bytes"):
            require_positive(name, getattr(self, name))
        for name in ("hbm_bytes", "dram_bytes"):
            if getattr(self, name) < self.page_bytes:
                raise LabkitError(f"{name} must hold at least one page of page_bytes={self.page_bytes} "
                                  f"(got {getattr(self, name)})")
        cat = hardware.load_catalogue()
        require_choice("gpu", self.gpu, cat.gpu_names())
        require_choice("dram", self.dram, cat.tier_names("dram"))
        require_choice("ssd", self.ssd, cat.tier_names("ssd"))

    def pages(self, tier: str) -> int:
        return {"HBM": self.hbm_bytes, "DRAM": self.dram_bytes}[tier] // self.page_bytes


def scaled(trace: StepTrace, hbm_fraction: float, dram_fraction: float = 1.0, **kw) -> Hierarchy:
    """A hierarchy whose HBM holds ``hbm_fraction`` and DRAM ``dram_fraction`` of the trace's paged working set."""
    for name, value in (("hbm_fraction", hbm_fraction), ("dram_fraction", dram_fraction)):
        require_positive(name, value, integer=False)
    page = kw.get("page_bytes", 4096)
    ws = sum(-(-b.nbytes // page) * page for b in trace.blocks)
    return Hierarchy(max(round(ws * hbm_fraction), 1), max(round(ws * dram_fraction), 1), **kw)


@dataclass(frozen=True)
class TierRow:
    """Reads that reached a tier and how many it served (pages and bytes)."""

    tier: str
    capacity_bytes: int | None  # None: the SSD, which backs everything
    reads: int
    hits: int
    hit_bytes: int

    @property
    def hit_rate(self) -> float:
        return self.hits / self.reads if self.reads else 1.0


@dataclass(frozen=True)
class Replay:
    """One policy's replay of a trace: hits per tier, bytes per link, and time in the simulator."""

    policy: str
    reads: int  # page reads by the ops
    created: int  # pages created in HBM (saved activations): no fetch
    misses: int  # page reads HBM did not hold
    tiers: tuple[TierRow, ...]
    link_bytes: tuple[tuple[str, int], ...]
    compute_s: float
    stall_s: float  # compute waiting for data
    makespan_s: float
    peak_hbm_pages: int

    def bytes_on(self, link: str) -> int:
        return dict(self.link_bytes)[require_choice("link", link, LINKS)]

    def rows(self) -> list[tuple]:
        """(tier, capacity bytes, reads, hits, hit rate, bytes served) per tier."""
        return [(t.tier, t.capacity_bytes, t.reads, t.hits, round(t.hit_rate, 4), t.hit_bytes) for t in self.tiers]


def _pages(trace: StepTrace, page: int) -> tuple[list[int], list[tuple[int, int, bool]]]:
    """Bytes of every page, and the reference string: (op, page, created) in order."""
    sizes, first = [], []
    for b in trace.blocks:
        first.append(len(sizes))
        n = -(-b.nbytes // page)
        sizes += [page] * (n - 1) + [b.nbytes - page * (n - 1)]
    refs = []
    for i, op in enumerate(trace.ops):
        for ids, created in ((op.reads, False), (op.writes, True)):
            for b in ids:
                n = -(-trace.blocks[b].nbytes // page)
                refs += [(i, first[b] + k, created) for k in range(n)]
    return sizes, refs


class _Cache:
    """One level: resident pages with LRU order, and the policy's choice of victim."""

    def __init__(self, slots: int, policy: str) -> None:
        self.slots, self.policy = slots, policy
        self.pages: OrderedDict[int, None] = OrderedDict()

    def touch(self, p: int) -> None:
        self.pages[p] = None
        self.pages.move_to_end(p)

    def victim(self, next_use: dict[int, int]) -> int:
        if self.policy not in MIN_EVICTION:
            return next(iter(self.pages))
        return max(self.pages, key=lambda q: (next_use.get(q, NEVER), q))


def replay(trace: StepTrace, hier: Hierarchy, policy: str = "lru", lookahead: int = 4) -> Replay:
    """Replay ``trace`` on ``hier`` under ``policy`` (one of ``POLICIES``); see the module docstring.

    Weights start in place, in order of first use: HBM first, then DRAM; the SSD holds a copy
    of all of them. An activation lives in HBM from its creation; evicted, it is written down
    (PCIe to DRAM, then NVMe to the SSD if DRAM evicts it); it is freed after its last use.
    """
    require_choice("policy", policy, POLICIES)
    require_positive("lookahead", lookahead)
    sizes, refs = _pages(trace, hier.page_bytes)
    kind = [b.kind for b in trace.blocks for _ in range(-(-b.nbytes // hier.page_bytes))]
    nxt, later = [NEVER] * len(refs), {}
    for pos in range(len(refs) - 1, -1, -1):
        nxt[pos], later[refs[pos][1]] = later.get(refs[pos][1], NEVER), pos
    last_op = {p: i for i, p, _ in refs}
    hbm, dram = _Cache(hier.pages("HBM"), policy), _Cache(hier.pages("DRAM"), policy)
    weights = [p for _, p, _ in refs if kind[p] == "weight"]
    for p in dict.fromkeys(weights):
        for level in (hbm, dram):
            if len(level.pages) < level.slots:
                level.touch(p)
                break
    on_ssd = set(weights)
    free = [-1] * (hbm.slots - len(hbm.pages))  # HBM slots: the op after which each is free
    next_use = {p: later.get(p, NEVER) for p in range(len(sizes))}
    n_ops = len(trace.ops)
    moved = [dict.fromkeys(LINKS, 0) for _ in range(n_ops)]
    ready = [-1] * n_ops
    served = dict.fromkeys(TIERS, (0, 0))
    reads = created = peak = 0
    last_seen: dict[int, int] = {}

    def to_dram(p: int, i: int) -> None:
        if len(dram.pages) >= dram.slots:
            v = dram.victim(next_use)
            del dram.pages[v]
            if v not in on_ssd and v not in hbm.pages:
                on_ssd.add(v)
                moved[i]["nvme write"] += sizes[v]
        dram.touch(p)

    def slot(i: int) -> None:
        if len(hbm.pages) >= hbm.slots:
            v = hbm.victim(next_use)
            del hbm.pages[v]
            if v not in dram.pages and v not in on_ssd:
                moved[i]["pcie d2h"] += sizes[v]
                to_dram(v, i)
            free.append(min(last_seen.get(v, -1), i - 1))
        heapq.heapify(free)
        ready[i] = max(ready[i], heapq.heappop(free))

    for pos, (i, p, new) in enumerate(refs):
        next_use[p] = nxt[pos]
        if new:
            created += 1
            slot(i)
        else:
            reads += 1
            tier = "HBM" if p in hbm.pages else "DRAM" if p in dram.pages else "SSD"
            pages_, nbytes = served[tier]
            served[tier] = (pages_ + 1, nbytes + sizes[p])
            if tier == "SSD":
                moved[i]["nvme read"] += sizes[p]
                to_dram(p, i)
            if tier != "HBM":
                dram.touch(p)
                moved[i]["pcie h2d"] += sizes[p]
                slot(i)
        hbm.touch(p)
        last_seen[p] = i
        peak = max(peak, len(hbm.pages))
        if pos + 1 == len(refs) or refs[pos + 1][0] != i:
            for q in [q for q in hbm.pages if kind[q] == "activation" and last_op[q] == i]:
                del hbm.pages[q]
                free.append(i)
            for q in [q for q in dram.pages if kind[q] == "activation" and last_op[q] <= i]:
                del dram.pages[q]
    return _timeline(trace, hier, policy, lookahead, moved, ready, served, reads, created, peak)


def _timeline(trace: StepTrace, hier: Hierarchy, policy: str, lookahead: int, moved: list[dict[str, int]],
              ready: list[int], served: dict, reads: int, created: int, peak: int) -> Replay:
    """Ops on "compute" and copies on the link streams, in ``labkit.sim``; the stall is compute's idle time.

    A copy for op i starts after op i-1 (LRU: demand) or, trace-aware, after the op that freed
    its slot and op i-1-lookahead, whichever is later.
    """
    gpu, dram, ssd = hardware.gpu(hier.gpu), hardware.tier(hier.dram), hardware.tier(hier.ssd)
    pcie = hardware.link(gpu.pcie)
    rate = {"pcie h2d": min(pcie.bandwidth, dram.read_bandwidth), "pcie d2h": min(pcie.bandwidth, dram.write_bandwidth),
            "nvme read": ssd.read_bandwidth, "nvme write": ssd.write_bandwidth}
    latency = {"pcie h2d": pcie.latency_s, "pcie d2h": pcie.latency_s, "nvme read": ssd.latency_s,
               "nvme write": ssd.latency_s}
    after = {"pcie h2d": ("pcie d2h", "nvme read"), "nvme read": ("nvme write",), "pcie d2h": (), "nvme write": ()}
    tasks = []
    for i, op in enumerate(trace.ops):
        start = i - 1 if policy not in PREFETCH else min(i - 1, max(ready[i], i - 1 - lookahead))
        base = (f"op {start}",) if start >= 0 else ()
        names = {}
        for link in ("pcie d2h", "nvme write", "nvme read", "pcie h2d"):
            if moved[i][link]:
                names[link] = f"{link} {i}"
                deps = base + tuple(names[d] for d in after[link] if d in names)
                tasks.append(Task(names[link], link, latency[link] + moved[i][link] / rate[link], deps, "copy"))
        touched = sum(trace.blocks[b].nbytes for b in (*op.reads, *op.writes))
        duration = hardware.roofline_time(op.flops, touched, gpu, trace.dtype)
        deps = tuple(names[d] for d in ("pcie h2d", "pcie d2h") if d in names)
        tasks.append(Task(f"op {i}", "compute", duration, deps, op.phase))
    timeline = simulate(tasks)
    compute = timeline.busy("compute")
    end = max(e.end for e in timeline.on("compute"))
    totals = tuple((link, sum(m[link] for m in moved)) for link in LINKS)
    h, d, s = (served[t] for t in TIERS)
    rows = (TierRow("HBM", hier.pages("HBM") * hier.page_bytes, reads, h[0], h[1]),
            TierRow("DRAM", hier.pages("DRAM") * hier.page_bytes, reads - h[0], d[0], d[1]),
            TierRow("SSD", None, s[0], s[0], s[1]))
    return Replay(policy, reads, created, reads - h[0], rows, totals, compute, end - compute, timeline.makespan, peak)


def compare(trace: StepTrace, hier: Hierarchy, lookahead: int = 4) -> tuple[Replay, Replay]:
    """LRU and the trace-aware schedule on the same trace and hierarchy."""
    return replay(trace, hier, "lru", lookahead), replay(trace, hier, "trace-aware", lookahead)


def ablation(trace: StepTrace, hier: Hierarchy, lookahead: int = 4) -> dict[str, Replay]:
    """Every policy on the same trace: LRU, MIN alone, prefetch alone, both (the trace-aware schedule)."""
    return {p: replay(trace, hier, p, lookahead) for p in POLICIES}
