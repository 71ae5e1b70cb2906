"""Mobius beside ZeRO-Offload-style per-layer streaming, on GPUs that share one PCIe uplink.

Feng et al., "Mobius: Fine Tuning Large-Scale Models on Commodity GPU Servers",
ASPLOS 2023: on servers of consumer GPUs without NVLink (e.g. 4 x RTX 4090), keep
the model in DRAM, cut it into more pipeline stages than GPUs, and prefetch each
stage onto its GPU once per forward and once per backward for all micro-batches,
so parameters cross PCIe about once per pass instead of once per GPU. The
alternative replayed here is data parallel with every GPU streaming every layer's
parameters from DRAM (ZeRO-Offload / ZeRO-Infinity style, Ren et al., ATC 2021).
Written by hand in ``labkit.sim`` (no library simulates either).

Assumptions: all GPUs sit behind one x16 uplink (a PCIe switch or one root
complex), modelled as one stream per direction ("pcie h2d", "pcie d2h") that
carries one transfer at a time at full bandwidth, which is the link divided among
the GPUs transferring at once; bf16 parameters (2 bytes) in, bf16 gradients out;
gradient reduction across data-parallel GPUs counted as each GPU sending its full
gradients to the host (no NVLink to reduce on); Mobius stage-boundary activations
go GPU to GPU on a "p2p" stream; two parameter buffers per GPU; Mobius does not
reload the last stage on each GPU for backward; the CPU Adam step is the same for
both and left out; compute at ``mfu`` of bf16 peak, backward 2x forward.
"""

from __future__ import annotations

from dataclasses import dataclass

from labkit.errors import LabkitError, require_positive
from labkit.estimate import forward_flops
from labkit.hardware import gpu, link
from labkit.shapes import ModelShape
from labkit.sim import Task, Timeline, simulate


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

    def __post_init__(self) -> None:
        for name in ("n_gpus", "seq", "batch", "microbatches", "stages"):
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


def _rate(s: Setup) -> float:
    return gpu(s.gpu_name).peak_flops["bf16"] * s.mfu


def _layer_fwd_s(s: Setup, samples: float) -> float:
    """Forward seconds of one layer for ``samples`` sequences (the output layer is left out for both)."""
    sh = s.shape
    layers = forward_flops(sh, s.seq, 1) - 2 * s.seq * sh.hidden * sh.vocab
    return samples * layers / sh.layers / _rate(s)


def mobius(s: Setup) -> Step:
    """Stage k on GPU k mod n; each stage's parameters cross the uplink once forward, once backward."""
    bw, p = link(s.uplink).bandwidth, s.shape.params_per_layer * (s.shape.layers // s.stages) * 2
    lps, mb, n, S, M = s.shape.layers // s.stages, s.batch // s.microbatches, s.n_gpus, s.stages, s.microbatches
    t_f, act = _layer_fwd_s(s, mb) * lps, 2.0 * s.seq * mb * s.shape.hidden
    tasks: list[Task] = []
    moved = 0.0
    for k in range(S):  # forward
        g, reuse = k % n, k - 2 * n
        deps = (f"F{reuse}.{M - 1}",) if reuse >= 0 else ()
        tasks.append(Task(f"loadF{k}", "pcie h2d", p / bw, deps, "load"))
        moved += p
        for j in range(M):
            d = [f"loadF{k}"] + ([f"actF{k - 1}.{j}"] if k else [])
            tasks.append(Task(f"F{k}.{j}", f"gpu {g}", t_f, tuple(d), "F", {"microbatch": j}))
            if k + 1 < S:
                tasks.append(Task(f"actF{k}.{j}", "p2p", act / bw, (f"F{k}.{j}",), "comm"))
    for k in reversed(range(S)):  # backward
        g = k % n
        if k < S - n:
            tasks.append(Task(f"loadB{k}", "pcie h2d", p / bw, (f"B{k + 2 * n}.{M - 1}",) if k + 2 * n < S
                              else (f"F{S - 1}.0",), "load"))
            moved += p
        for j in range(M):
            d = [f"F{k}.{j}"] + ([f"loadB{k}"] if k < S - n else []) + ([f"actB{k + 1}.{j}"] if k + 1 < S else [])
            tasks.append(Task(f"B{k}.{j}", f"gpu {g}", 2 * t_f, tuple(d), "B", {"microbatch": j}))
            if k:
                tasks.append(Task(f"actB{k}.{j}", "p2p", act / bw, (f"B{k}.{j}",), "comm"))
        tasks.append(Task(f"grad{k}", "pcie d2h", p / bw, (f"B{k}.{M - 1}",), "offload"))
        moved += p
    tl = simulate(tasks)
    return Step("Mobius", tl, tl.makespan, moved)


def zero_offload(s: Setup) -> Step:
    """Data parallel: every GPU streams every layer's parameters in, forward and backward, and its gradients out."""
    bw, p, L, n = link(s.uplink).bandwidth, 2.0 * s.shape.params_per_layer, s.shape.layers, s.n_gpus
    t_f = _layer_fwd_s(s, s.batch / n)
    tasks: list[Task] = []
    order = ["F"] * L + ["B"] * L
    for i, ph in enumerate(order):
        for g in range(n):
            deps = (f"g{g}.{i - 2}",) if i >= 2 else ()
            tasks.append(Task(f"load{g}.{i}", "pcie h2d", p / bw, deps, "load"))
            d = (f"load{g}.{i}",) + ((f"g{g}.{i - 1}",) if i else ())
            tasks.append(Task(f"g{g}.{i}", f"gpu {g}", t_f if ph == "F" else 2 * t_f, d, ph))
            if ph == "B":
                tasks.append(Task(f"grad{g}.{i}", "pcie d2h", p / bw, (f"g{g}.{i}",), "offload"))
    tl = simulate(tasks)
    return Step("ZeRO-Offload (per-layer streaming)", tl, tl.makespan, 3 * p * L * n)


def compare(s: Setup) -> dict[str, float]:
    """Step seconds and GB (1e9 bytes) over the shared uplink for both, and the ratios."""
    a, b = mobius(s), zero_offload(s)
    return {"mobius_s": a.time_s, "zero_offload_s": b.time_s, "speedup": b.time_s / a.time_s,
            "mobius_gb": a.pcie_bytes / 1e9, "zero_offload_gb": b.pcie_bytes / 1e9,
            "bytes_ratio": b.pcie_bytes / a.pcie_bytes}
