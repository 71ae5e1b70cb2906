"""vDNN on a real GPU and link, as a timeline of compute and copies: the stall it adds."""

from __future__ import annotations

import time

from labkit.errors import require_positive
from labkit.hardware import gpu as find_gpu
from labkit.hardware import link as find_link
from labkit.hardware import transfer_time
from labkit.sim import Task, Timeline, simulate


def timed(fn, *args) -> tuple[object, float]:
    """(result, wall-clock seconds): for printing, never for asserting."""
    t0 = time.perf_counter()
    out = fn(*args)
    return out, time.perf_counter() - t0


def predict_vdnn(offload_bytes_per_layer: float, forward_flops_per_layer: float, n_layers: int,
                 gpu: str = "A100-80GB", link: str | None = None, efficiency: float = 0.5,
                 dtype: str = "bf16") -> Timeline:
    """vDNN on a real GPU and link, as a :class:`labkit.sim.Timeline` (streams compute, d2h, h2d).

    Compute per layer is FLOPs / (peak * efficiency), backward twice forward; a copy is
    ``transfer_time`` over the GPU's PCIe link unless ``link`` names another. As in vDNN,
    layer i's offload starts when its forward ends and overlaps the next layer's forward;
    layer i+2 waits for it (two layers' buffers on the device). The prefetch of layer i
    starts when backward of layer i+1 starts, and backward of layer i waits for it. The last
    layer stays on the device: its backward comes first, right after its forward.
    Compute idle time is the time added: ``stall_seconds``.
    """
    require_positive("n_layers", n_layers)
    require_positive("efficiency", efficiency, integer=False)
    dev = find_gpu(gpu)
    wire = find_link(link or dev.pcie)
    t_f = forward_flops_per_layer / (dev.peak_flops[dtype] * efficiency)
    t_x = transfer_time(offload_bytes_per_layer, wire)
    tasks, L = [], n_layers
    for i in range(L):
        deps = (f"d2h {i - 2}",) if i >= 2 else ()
        tasks.append(Task(f"F {i}", "compute", t_f, deps, "F", {"layer": i}))
        if i < L - 1:
            meta = {"layer": i, "bytes": offload_bytes_per_layer}
            tasks.append(Task(f"d2h {i}", "d2h", t_x, (f"F {i}",), "d2h", meta))
    for i in reversed(range(L)):
        deps: tuple[str, ...] = ()
        if i < L - 1:
            start = (f"B {i + 2}",) if i + 2 < L else (f"F {L - 1}",)
            tasks.append(Task(f"h2d {i}", "h2d", t_x, (*start, f"d2h {i}"), "h2d", {"layer": i}))
            deps = (f"h2d {i}",)
        tasks.append(Task(f"B {i}", "compute", 2 * t_f, deps, "B", {"layer": i}))
    return simulate(tasks)


def stall_seconds(timeline: Timeline) -> float:
    """Time the compute stream waits for copies: the seconds offload adds to the step."""
    return timeline.makespan - timeline.busy("compute")
