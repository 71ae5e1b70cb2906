"""The largest model that fits a GPU: model states only, for a layout, a ZeRO stage and a convention.

Model states grow linearly with the parameter count P: per GPU they are b x P / (tp x pp) bytes,
with b the convention's bytes per parameter at that stage and data-parallel degree
(``conventions.per_param``), plus a fixed ZeRO-3 gather buffer of 4 bytes x the largest layer when
it is counted. So the largest P is floor((capacity - buffer) x tp x pp / b). ZeRO's Table 2
(Rajbhandari et al., SC 2020: the largest model per stage on 32 GB V100s with data parallel 64
and model parallel 1 to 16) is this answer under ZeRO's own conventions: 16 bytes per parameter,
no buffer, and the nominal 32 GB read as 32e9 bytes. Activations, buffers and fragmentation are
left out, as the table leaves them out; a real run fits less.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from labkit.errors import LabkitError, require_positive
from labkit.hardware import gpu
from labkit.predict.conventions import StateSetup, per_param
from labkit.references import zero_table2


@dataclass(frozen=True)
class Largest:
    """The largest parameter count whose model states fit ``capacity_bytes`` (``math.inf``: not bounded)."""

    params: float
    capacity_bytes: float
    bytes_per_param: float  # GPU bytes per parameter of the whole model (model parallelism divided in)
    fixed_bytes: float  # the ZeRO-3 gather buffer, when counted
    convention: str


def largest_params(capacity_bytes: float, zero_stage: int = 0, dp: int = 1, model_parallel: int = 1,
                   convention: str = "zero", offload_optimizer: str = "none", offload_param: str = "none",
                   largest_layer: int = 0, gpus_per_node: int = 1) -> Largest:
    """The largest P whose states fit one GPU of ``capacity_bytes`` (stage, dp, tp x pp and offload as given)."""
    require_positive("capacity_bytes", capacity_bytes, integer=False)
    setup = StateSetup(1, zero_stage, dp, model_parallel, gpus_per_node, offload_optimizer, offload_param,
                       largest_layer)
    per = sum(per_param(convention, setup).values()) / model_parallel
    fixed = 4.0 * largest_layer if zero_stage == 3 else 0.0
    if per == 0:
        return Largest(math.inf, capacity_bytes, 0.0, fixed, convention)
    return Largest(float(max(0, math.floor((capacity_bytes - fixed) / per))), capacity_bytes, per, fixed, convention)


@dataclass(frozen=True)
class Table2Row:
    """One row of ZeRO's Table 2: labkit's largest model per stage beside the printed one."""

    mp: int
    gpus: int
    computed: tuple[float, ...]  # baseline, stage 1, 2, 3
    published: tuple[float, ...]

    @property
    def worst_error(self) -> float:
        return max(abs(c / p - 1) for c, p in zip(self.computed, self.published, strict=True))


def zero_table2_reproduced(device: str = "V100-32GB") -> list[Table2Row]:
    """ZeRO's Table 2 from :func:`largest_params`: ZeRO's 16 B/param, the GPU's nominal capacity (GB = 1e9)."""
    capacity = gpu(device).memory_nominal_bytes
    rows = []
    for ref in zero_table2():
        if capacity != ref.device_gb * 1e9:
            raise LabkitError(f"device must be a {ref.device_gb:g} GB GPU as in ZeRO's Table 2 (got {device!r})")
        computed = tuple(largest_params(capacity, stage, ref.dp, ref.mp).params for stage in range(4))
        rows.append(Table2Row(ref.mp, ref.gpus, computed, ref.params))
    return rows


def _count(n: float) -> str:
    return f"{n / 1e12:,.2f} tn" if n >= 1e12 else f"{n / 1e9:,.1f} bn"


def table2_text(rows: list[Table2Row]) -> str:
    """The reproduced table, each cell "labkit (paper)", counts in bn / tn parameters."""
    head = ["MP", "GPUs", "baseline", "ZeRO-1 (Pos)", "ZeRO-2 (Pos+g)", "ZeRO-3 (Pos+g+p)", "worst"]
    body = [[str(r.mp), f"{r.gpus:,}", *(f"{_count(c)} ({_count(p)})" for c, p in zip(r.computed, r.published,
                                                                                  strict=True)),
             f"{100 * r.worst_error:.1f}%"] for r in rows]
    widths = [max(len(x) for x in col) for col in zip(head, *body, strict=True)]
    lines = ["  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)) for row in [head, *body]]
    return "\n".join([lines[0], "  ".join("-" * w for w in widths), *lines[1:]])
