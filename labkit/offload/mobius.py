"""Mobius beside ZeRO-style parameter streaming, on GPUs that share one PCIe uplink.

Feng et al., "Mobius: Fine Tuning Large-Scale Models on Commodity GPU Servers",
ASPLOS 2023: on servers of consumer GPUs without NVLink (e.g. 4 x RTX 4090), keep
the model in DRAM, cut it into more pipeline stages than GPUs, and prefetch each
stage onto its GPU while the stage before it computes, so parameters cross PCIe
about once per step instead of once per GPU, and GPUs talk only at stage
boundaries (a few MB of activations). The paper's baseline is DeepSpeed's
heterogeneous-memory data parallelism (ZeRO-3 with parameters and optimizer in
DRAM, ZeRO-Offload / ZeRO-Infinity, Ren et al., ATC 2021; Rajbhandari et al., SC
2021): every GPU gathers every layer's parameters, twice per step, and gradients
are reduce-scattered, and on a commodity server every one of those collectives
goes through host memory. The paper measures 3.8-5.1x in Mobius's favour and
blames exactly that: DeepSpeed's traffic grows with the number of GPUs and all of
it contends for the same PCIe links. Written by hand in ``labkit.sim`` (no
library simulates either).

Assumptions (each is a choice of the paper's regime, not a free parameter):

* all GPUs sit behind one x16 ``uplink`` (a PCIe switch or one root complex): one
  stream per direction ("pcie h2d", "pcie d2h") carrying one transfer at a time at
  full bandwidth, served first come, first served (``_first_come``); a transfer
  between two GPUs is a copy out to DRAM and a copy back in (GeForce cards have no
  peer-to-peer, and NCCL's shared-memory transport stages through host memory);
* bf16 parameters (2 bytes) in, bf16 gradients out; the CPU Adam step is the same
  for both and left out; compute at ``mfu`` of bf16 peak, backward 2x forward, the
  output layer left out for both;
* ZeRO: a ring all-gather of each layer through host memory (each GPU reads its
  1/n shard from DRAM, sends (n-1)/n of the layer out and receives (n-1)/n back),
  forward and again in backward; a ring reduce-scatter of its gradients the same
  way, then its 1/n shard of reduced gradients out to DRAM; two layer buffers;
* Mobius: stage k on GPU k mod n (on one shared uplink the paper's cross mapping
  changes nothing), ``buffers`` stage buffers per GPU; stage k + n is prefetched
  while stage k computes (and once the buffer it reuses is free); a stage still
  resident after forward is not loaded again for backward; a GPipe order of
  ``microbatches`` per stage. A stage-boundary activation (a few MB) goes out to
  DRAM and back on the "act" side streams of the same uplink: PCIe interleaves
  concurrent DMA transfers packet by packet, so a few MB do not wait behind a
  GB-sized stage load as they would in a first-come-first-served queue (their
  bytes, an eighth of Mobius's at the defaults, are counted; the time they take
  from the loads is not).

Per step, for L layers of P parameters each and n GPUs (2P bytes per layer):
ZeRO moves (3n - 1) 2PL in and (3n - 2) 2PL out; Mobius moves 2PL in (plus the
stages reloaded for backward), 2PL of gradients out, and 2 (S - 1) M activations
each way. ZeRO's step cannot be shorter than (3n - 1) 2PL / bandwidth, Mobius's
not shorter than its pipeline, whose bubble (GPipe, Huang et al. 2019) it pays
and data parallelism does not: so Mobius wins when the step is link-bound (the
fine-tuning regime of the paper: small batches, many GPUs per uplink) and loses
when per-GPU compute is long enough to hide ZeRO's traffic (large batches).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from labkit.errors import LabkitError, require_positive
from labkit.hardware import gpu, link
from labkit.predict.estimate import forward_flops
from labkit.shapes import ModelShape
from labkit.sim import Event, Task, Timeline

UPLINK = ("pcie h2d", "pcie d2h")  # parameters, gradients and collectives: a first-come-first-served queue
HOPS = ("pcie h2d act", "pcie d2h act")  # Mobius's stage-boundary activations (see the module docstring)


@dataclass(frozen=True)
class Setup:
    """``n_gpus`` of ``gpu_name`` behind one ``uplink``; a global batch of ``batch`` sequences of ``seq``."""

    shape: ModelShape
    gpu_name: str = "RTX-4090"
    n_gpus: int = 4
    uplink: str = "pcie4-x16"
    seq: int = 1024
    batch: int = 16
    microbatches: int = 4
    stages: int = 8
    mfu: float = 0.5
    buffers: int = 2

    def __post_init__(self) -> None:
        for name in ("n_gpus", "seq", "batch", "microbatches", "stages", "buffers"):
            require_positive(name, getattr(self, name))
        if self.stages % self.n_gpus or self.shape.layers % self.stages:
            raise LabkitError(f"stages must be a multiple of n_gpus={self.n_gpus} and divide "
                              f"layers={self.shape.layers} (got {self.stages})")
        if self.batch % self.microbatches or self.batch % self.n_gpus:
            raise LabkitError(f"batch must be a multiple of microbatches and of n_gpus (got {self.batch})")


@dataclass
class Step:
    """One simulated step: timeline, seconds, and bytes over the shared uplink (both directions)."""

    name: str
    timeline: Timeline
    time_s: float
    pcie_bytes: float

    def bytes_on(self, stream: str) -> float:
        """Bytes of the transfers placed on ``stream`` (each task carries its bytes)."""
        return sum(e.meta["bytes"] for e in self.timeline.on(stream))

    @property
    def compute_s(self) -> float:
        """Busy seconds of the busiest GPU."""
        return max(self.timeline.busy(x) for x in self.timeline.streams if x.startswith("gpu "))


def _rate(s: Setup) -> float:
    return gpu(s.gpu_name).peak_flops["bf16"] * s.mfu


def _layer_fwd_s(s: Setup, samples: float) -> float:
    """Forward seconds of one layer for ``samples`` sequences (the output layer is left out for both)."""
    sh = s.shape
    layers = forward_flops(sh, s.seq, 1) - 2 * s.seq * sh.hidden * sh.vocab
    return samples * layers / sh.layers / _rate(s)


def _copy(name: str, direction: str, nbytes: float, deps: tuple[str, ...], s: Setup, kind: str) -> Task:
    return Task(name, f"pcie {direction}", nbytes / link(s.uplink).bandwidth, deps, kind, {"bytes": nbytes})


def _first_come(tasks: list[Task]) -> Timeline:
    """Like ``labkit.sim.simulate``, but the uplink streams serve transfers in the order they become ready.

    ``simulate`` runs a stream's tasks in list order, right for a GPU's program; a shared link is a queue.
    List scheduling: repeatedly place, of all tasks whose dependencies are placed (the head of each
    in-order stream, any ready transfer of a queued one), the one that can start first. Every later task
    becomes ready no earlier than that start, so no transfer is ever passed by one that was ready later.
    """
    queued = set(UPLINK + HOPS)
    by_name = {t.name: t for t in tasks}
    order = {t.name: i for i, t in enumerate(tasks)}
    waiting = {t.name: set(t.deps) for t in tasks}
    users: dict[str, list[str]] = {}
    for t in tasks:
        for d in t.deps:
            users.setdefault(d, []).append(t.name)
    lanes: dict[str, list[str]] = {}
    for t in tasks:
        lanes.setdefault(t.stream, []).append(t.name)
    head = dict.fromkeys(lanes, 0)
    free: dict[str, float] = dict.fromkeys(lanes, 0.0)
    end: dict[str, float] = {}
    placed: dict[str, Event] = {}
    ready = {t.name for t in tasks if not t.deps}
    while len(placed) < len(tasks):
        best: tuple[float, float, int, str] | None = None  # (start, ready at, list position, name)
        for name in ready:
            t = by_name[name]
            if t.stream not in queued and lanes[t.stream][head[t.stream]] != name:
                continue
            at = max((end[d] for d in t.deps), default=0.0)
            key = (max(at, free[t.stream]), at, order[name], name)
            best = key if best is None or key < best else best
        if best is None:
            raise LabkitError(f"dependency cycle among {len(tasks) - len(placed)} unplaced transfers and kernels")
        start, _, _, name = best
        t = by_name[name]
        end[name] = free[t.stream] = start + t.duration
        placed[name] = Event(name, t.stream, start, end[name], t.kind, dict(t.meta))
        ready.discard(name)
        head[t.stream] += 1
        for u in users.get(name, ()):
            waiting[u].discard(name)
            if not waiting[u]:
                ready.add(u)
    return Timeline([placed[t.name] for t in tasks])


def _step(name: str, tasks: list[Task]) -> Step:
    tl = _first_come(tasks)
    return Step(name, tl, tl.makespan, sum(t.meta["bytes"] for t in tasks if t.stream in UPLINK + HOPS))


def mobius(s: Setup) -> Step:
    """Stage k on GPU k mod n, loaded while the previous stage computes; activations hop through DRAM."""
    n, S, M = s.n_gpus, s.stages, s.microbatches
    p = 2.0 * s.shape.params_per_layer * (s.shape.layers // S)
    t_f = _layer_fwd_s(s, s.batch // M) * (s.shape.layers // S)
    act, ring = 2.0 * s.seq * (s.batch // M) * s.shape.hidden, s.buffers * n
    tasks: list[Task] = []

    def hop(tag: str, k: int, j: int) -> None:  # stage boundary: out to DRAM, back in on the next GPU
        tasks.append(_copy(f"{tag}{k}.{j}.out", "d2h act", act, (f"{tag[-1]}{k}.{j}",), s, "comm"))
        tasks.append(_copy(f"{tag}{k}.{j}.in", "h2d act", act, (f"{tag}{k}.{j}.out",), s, "comm"))

    for k in range(S):  # forward
        deps = ((f"F{k - n}.0",) if k >= n else ()) + ((f"F{k - ring}.{M - 1}",) if k >= ring else ())
        tasks.append(_copy(f"loadF{k}", "h2d", p, deps, s, "load"))
        for j in range(M):
            d = (f"loadF{k}",) + ((f"xF{k - 1}.{j}.in",) if k else ())
            tasks.append(Task(f"F{k}.{j}", f"gpu {k % n}", t_f, d, "F", {"microbatch": j}))
            if k + 1 < S:
                hop("xF", k, j)
    for k in reversed(range(S)):  # backward
        reload = k < S - ring
        if reload:
            deps = (f"B{k + ring}.{M - 1}",) if k + ring < S else (f"F{S - 1}.0",)
            tasks.append(_copy(f"loadB{k}", "h2d", p, deps, s, "load"))
        for j in range(M):
            d = (f"F{k}.{j}",) + ((f"loadB{k}",) if reload else ()) + ((f"xB{k + 1}.{j}.in",) if k + 1 < S else ())
            tasks.append(Task(f"B{k}.{j}", f"gpu {k % n}", 2 * t_f, d, "B", {"microbatch": j}))
            if k:
                hop("xB", k, j)
        tasks.append(_copy(f"grad{k}", "d2h", p, (f"B{k}.{M - 1}",), s, "offload"))
    return _step("Mobius", tasks)


def zero_offload(s: Setup) -> Step:
    """Data parallel: per layer, forward and backward, a ring all-gather through DRAM; gradients reduce-scattered."""
    n, L, p = s.n_gpus, s.shape.layers, 2.0 * s.shape.params_per_layer
    t_f, shard, peer = _layer_fwd_s(s, s.batch / n), p / n, p * (n - 1) / n
    tasks: list[Task] = []
    for i, ph in enumerate(["F"] * L + ["B"] * L):
        for g in range(n):
            tasks.append(_copy(f"shard{g}.{i}", "h2d", shard, (f"g{g}.{i - 2}",) if i >= 2 else (), s, "load"))
            if n > 1:
                tasks.append(_copy(f"send{g}.{i}", "d2h", peer, (f"shard{g}.{i}",), s, "comm"))
        for g in range(n):
            got = (f"shard{g}.{i}",)
            if n > 1:
                got = (f"recv{g}.{i}",)
                peers = tuple(f"send{h}.{i}" for h in range(n) if h != g)
                tasks.append(_copy(f"recv{g}.{i}", "h2d", peer, (f"shard{g}.{i}", *peers), s, "comm"))
            tasks.append(Task(f"g{g}.{i}", f"gpu {g}", t_f if ph == "F" else 2 * t_f,
                              got + ((f"g{g}.{i - 1}",) if i else ()), ph))
        if ph == "B":
            for g in range(n):
                if n > 1:
                    tasks.append(_copy(f"rs{g}.{i}.out", "d2h", peer, (f"g{g}.{i}",), s, "comm"))
            for g in range(n):
                done = (f"g{g}.{i}",)
                if n > 1:
                    peers = tuple(f"rs{h}.{i}.out" for h in range(n) if h != g)
                    tasks.append(_copy(f"rs{g}.{i}.in", "h2d", peer, (f"rs{g}.{i}.out", *peers), s, "comm"))
                    done = (f"rs{g}.{i}.in",)
                tasks.append(_copy(f"grad{g}.{i}", "d2h", shard, done, s, "offload"))
    return _step("ZeRO-Offload/Infinity (DeepSpeed data parallel, parameters in DRAM)", tasks)


def expected_bytes(s: Setup) -> dict[str, float]:
    """The byte counts of the module docstring, from the formulas alone (the simulator must move exactly these)."""
    n, L, S, M = s.n_gpus, s.shape.layers, s.stages, s.microbatches
    layer = 2.0 * s.shape.params_per_layer
    act = 2.0 * s.seq * (s.batch // M) * s.shape.hidden
    reloads = max(0, S - s.buffers * n) * layer * (L // S)
    hops = 2 * (S - 1) * M * act
    return {"mobius_h2d": layer * L + reloads + hops, "mobius_d2h": layer * L + hops,
            "zero_h2d": (3 * n - 1) * layer * L, "zero_d2h": (3 * n - 2) * layer * L}


def compare(s: Setup) -> dict[str, float | str]:
    """Step seconds and GB (1e9 bytes) over the shared uplink for both, the ratios, and which regime this is.

    ``faster`` names the faster system; ``why`` says whether the step is link-bound (ZeRO's uplink time
    exceeds its compute: Mobius's regime in the paper) or compute-bound (ZeRO's traffic hides behind
    compute, and Mobius's pipeline bubble makes it the slower one).
    """
    a, b = mobius(s), zero_offload(s)
    bw = link(s.uplink).bandwidth
    zero_link_s = max(b.bytes_on(x) for x in UPLINK) / bw
    speedup = b.time_s / a.time_s
    if speedup >= 1:
        why = (f"link-bound: ZeRO's {b.pcie_bytes / 1e9:.0f} GB need {zero_link_s:.2f} s of the shared uplink, "
               f"more than its {b.compute_s:.2f} s of compute per GPU; Mobius moves {a.pcie_bytes / 1e9:.0f} GB")
    else:
        why = (f"compute-bound: ZeRO's {zero_link_s:.2f} s of uplink traffic hide behind {b.compute_s:.2f} s of "
               f"compute per GPU, while Mobius's pipeline leaves its GPUs idle for "
               f"{a.time_s - a.compute_s:.2f} s of its {a.time_s:.2f} s step")
    return {"mobius_s": a.time_s, "zero_offload_s": b.time_s, "speedup": speedup,
            "mobius_gb": a.pcie_bytes / 1e9, "zero_offload_gb": b.pcie_bytes / 1e9,
            "bytes_ratio": b.pcie_bytes / a.pcie_bytes, "zero_link_s": zero_link_s,
            "zero_compute_s": b.compute_s, "mobius_compute_s": a.compute_s,
            "faster": "Mobius" if speedup >= 1 else "ZeRO", "why": why}


def sweep(s: Setup, batches: tuple[int, ...] = (4, 16, 64, 256)) -> list[dict[str, float | str]]:
    """``compare`` at several global batches (micro-batches scale with it): where the winner changes."""
    rows = []
    for b in batches:
        row = compare(replace(s, batch=b, microbatches=min(b, max(s.microbatches, b // s.n_gpus))))
        rows.append({"batch": b, **row})
    return rows
