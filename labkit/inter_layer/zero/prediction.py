"""ZeRO's bytes and elements (the paper's, and torch's partition and padding) beside a run's measured ones."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from labkit.errors import require_choice, require_positive
from labkit.inter_layer.zero.comm import volume
from labkit.inter_layer.zero.engines import CATEGORIES, STRATEGIES, model_config
from labkit.inter_layer.zero.worker import RankResult
from labkit.measure.record import Record
from labkit.predict.estimate import model_state_bytes, zero_communication_elements
from labkit.rig.model import TinyGPT


@dataclass(frozen=True)
class Prediction:
    """Bytes per rank and elements per step: the paper's figures and those of torch's engines."""

    strategy: str
    world_size: int
    params: int
    bytes_paper: dict[str, float]
    bytes_torch: dict[str, list[int]]  # per rank: a greedy partition or padding can make ranks differ
    comm_paper: int
    comm_torch: dict[str, int]  # elements by collective kind

    def volume_torch(self, backend: str = "nccl") -> int:
        return volume({k: {"elements": v} for k, v in self.comm_torch.items()}, backend)


def _elements_held(shapes: list[tuple[int, ...]], stage: int, n: int) -> dict[str, list[int]]:
    """Elements each rank keeps per category, laid out as torch's engines lay them out."""
    psi = sum(math.prod(s) for s in shapes)
    if stage == 3:  # FSDP2 pads dim 0 to a multiple of n: shards keep the padding, AdamW's states do not
        chunks = [(-(-s[0] // n), s[0], math.prod(s[1:])) for s in shapes]
        padded = sum(c * row for c, _, row in chunks)
        real = [sum(max(0, min(c, rows - r * c)) * row for c, rows, row in chunks) for r in range(n)]
        return {"parameters": [padded] * n, "gradients": [padded] * n, "optimizer": real}
    if stage == 2:
        flat = -(-psi // n)  # the flat buffer is padded to a multiple of n
        return {"parameters": [flat * n] * n, "gradients": [flat] * n, "optimizer": [flat] * n}
    owned = [0] * n  # ZeroRedundancyOptimizer: largest tensor first, to the rank that owns least so far
    for size in sorted((math.prod(s) for s in shapes), reverse=True):
        owned[owned.index(min(owned))] += size
    return {"parameters": [psi] * n, "gradients": [psi] * n, "optimizer": owned if stage == 1 else [psi] * n}


def predict(strategy: str, world_size: int, model: dict | None = None) -> Prediction:
    """ZeRO's model (labkit.predict.estimate, fp32 AdamW) beside torch's partition, padding and extra broadcast."""
    require_choice("strategy", strategy, STRATEGIES)
    require_positive("world_size", world_size)
    stage, n = STRATEGIES[strategy], world_size
    with torch.device("meta"):
        shapes = [tuple(p.shape) for p in TinyGPT(model_config(model)).parameters()]
    psi = sum(math.prod(s) for s in shapes)
    held = _elements_held(shapes, stage, n)
    full = n * held["gradients"][0]  # what one stage-2/3 reduce-scatter or all-gather covers, padding included
    comm = [{"all_reduce": psi}, {"all_reduce": psi, "broadcast": psi},
            {"reduce_scatter": full, "all_gather": full}, {"reduce_scatter": full, "all_gather": 2 * full}][stage]
    per = {"parameters": 4, "gradients": 4, "optimizer": 8}
    return Prediction(strategy, n, psi, model_state_bytes(psi, "fp32", stage, n),
                      {k: [per[k] * e for e in v] for k, v in held.items()},
                      zero_communication_elements(psi, stage), comm)


SOURCE = "torch's partition and padding; paper: Rajbhandari et al. 2020"


def compare(results: list[RankResult]) -> list[Record]:
    """Bytes per category and steady-state elements per collective, every rank, measured beside torch's
    predicted figure and the paper's (``paper`` None where it has none)."""
    rows = []
    for r in results:
        pred, where = predict(r.strategy, r.world_size, r.model), (("strategy", r.strategy), ("rank", r.rank))
        for c in CATEGORIES:
            rows.append(Record(c, r.held[c], pred.bytes_torch[c][r.rank], "bytes", SOURCE, pred.bytes_paper[c],
                               where=where))
        for kind in sorted({*r.steady, *pred.comm_torch}):
            got = r.steady.get(kind, {}).get("elements", 0)
            rows.append(Record(f"comm {kind}", got, pred.comm_torch.get(kind, 0), "elements", SOURCE, where=where))
        rows.append(Record("comm volume", volume(r.steady), pred.volume_torch(), "elements", SOURCE, pred.comm_paper,
                           where=where))
        if r.profiled:
            rows.append(Record("comm volume on gloo", volume(r.profiled), pred.volume_torch("gloo"), "elements", SOURCE,
                               pred.comm_paper, where=where))
    return rows
