"""The hardware model as data: GPUs, memory tiers, links and hosts from ``datasets/hardware.toml``.

Figures live in a human-readable file, not in code, so a learner adds their own GPU by copying a
block, and every figure sits next to its source. ``parse`` turns the file's units (GB,
GB/s, TFLOPS, us) into bytes, seconds, FLOP/s and watts once, on load, so no caller ever converts
units again; people see units only through :func:`format_bytes`. GB means 1e9 bytes here, GiB
2**30. The types live in ``types``; the package is the one place callers import from. The base layer:
it imports only :mod:`labkit.errors`.
"""

from __future__ import annotations

import functools
import math
from pathlib import Path

from labkit.errors import LabkitError, require_choice
from labkit.hardware.parse import load
from labkit.hardware.types import (
    _UNITS,
    GB,
    HOST_KINDS,
    LINK_KINDS,
    Catalogue,
    Cluster,
    Device,
    Host,
    Link,
    Tier,
    _number,
)

__all__ = ["DEFAULT_PATH", "GB", "HOST_KINDS", "LINK_KINDS", "Catalogue", "Cluster", "Device", "Host", "Link", "Tier",
           "cluster", "format_bytes", "gpu", "host", "link", "load_catalogue", "roofline_time", "tier",
           "transfer_time"]

DEFAULT_PATH = Path(__file__).resolve().parents[2] / "datasets" / "hardware.toml"


@functools.lru_cache(maxsize=1)
def _default_catalogue() -> Catalogue:
    return load(DEFAULT_PATH)


def load_catalogue(path: str | Path | None = None) -> Catalogue:
    """Load a hardware file; the default one is read once and cached, others every call."""
    return _default_catalogue() if path is None else load(Path(path))


def gpu(name: str) -> Device:
    return load_catalogue().gpu(name)


def tier(name: str) -> Tier:
    return load_catalogue().tier(name)


def link(name: str) -> Link:
    return load_catalogue().link(name)


def host(name: str) -> Host:
    return load_catalogue().host(name)


def transfer_time(nbytes: float, link: Link) -> float:
    """Seconds to move ``nbytes`` one way: latency + size / bandwidth (alpha-beta model).

    Moving nothing costs nothing, so 0 bytes gives 0.0 rather than the latency.
    """
    n = _number("nbytes", nbytes)
    return 0.0 if n == 0 else link.latency_s + n / link.bandwidth


def roofline_time(flops: float, nbytes: float, device: Device, dtype: str = "bf16", efficiency: float = 1.0,
                  memory_efficiency: float = 1.0) -> float:
    """A kernel's time: the slower of computing and reading memory, at the given shares of the peaks.

    Roofline model, Williams, Waterman and Patterson, CACM 2009: a kernel cannot finish before
    its FLOPs at ``efficiency`` x peak, nor before its bytes at ``memory_efficiency`` x memory
    bandwidth. At 1.0 and 1.0 (the default) it is the lower bound; ``labkit.predict.compute`` holds
    the shares real kernels reach. The one compute-time formula of labkit.
    """
    f, n = _number("flops", flops), _number("nbytes", nbytes)
    require_choice("dtype", dtype, list(device.peak_flops))
    for name, value in (("efficiency", efficiency), ("memory_efficiency", memory_efficiency)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
            raise LabkitError(f"{name} must be a share of the peak in (0, 1] (got {value!r})")
    return max(f / (device.peak_flops[dtype] * efficiency), n / (device.memory_bandwidth * memory_efficiency))


def cluster(
    gpu_name: str,
    gpus_per_node: int = 8,
    nodes: int = 1,
    inter_node: str = "ib-hdr",
    catalogue: Catalogue | None = None,
) -> Cluster:
    """Build a cluster; GPUs in a node talk over NVLink if the card has it, else PCIe."""
    cat = catalogue or load_catalogue()
    device = cat.gpu(gpu_name)
    intra = cat.link(device.nvlink or device.pcie)
    return Cluster(device, gpus_per_node, nodes, intra, cat.link(inter_node))


def format_bytes(n: float, unit: str = "GB", digits: int = 1) -> str:
    """Bytes for people, with the unit spelt out: GB = 1e9, GiB = 2**30."""
    if isinstance(n, bool) or not isinstance(n, (int, float)) or not math.isfinite(n):
        raise LabkitError(f"n must be a finite number of bytes (got {n!r})")
    require_choice("unit", unit, _UNITS)
    return f"{n / _UNITS[unit]:.{digits}f} {unit}"
