"""Published figures as data: ``datasets/references.toml``, loaded and checked.

The analytic model (``labkit.predict.estimate``) implements formulas; this module holds
the numbers papers print, so a test can compute a figure from the formula and
compare it with the published one, and a notebook can cite it. Each entry keeps
its source. Failure traces turn into rates per GPU-day: a job's expected
failures grow linearly with its GPU count when failures are independent, which
is the assumption behind Young's checkpoint interval (CACM 1974).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from labkit.errors import LabkitError, read_toml, require_positive

REFERENCES_FILE = Path(__file__).resolve().parent.parent / "datasets" / "references.toml"


@dataclass(frozen=True)
class FailureTrace:
    """Interruptions of one published training run: how many, on how many GPUs, over how long."""

    name: str
    gpu: str
    gpus: int
    days: float
    interruptions: int
    unexpected: int
    source: str
    hardware_share: float | None = None
    note: str = ""

    @property
    def rate_per_gpu_day(self) -> float:
        """Unexpected interruptions per GPU per day, assuming independent failures."""
        return self.unexpected / (self.gpus * self.days)

    def failures_per_day(self, n_gpus: int) -> float:
        """Expected unexpected interruptions per day for a job on ``n_gpus`` GPUs at this rate."""
        require_positive("n_gpus", n_gpus)
        return self.rate_per_gpu_day * n_gpus

    def mtbf_hours(self, n_gpus: int) -> float:
        """Mean time between failures of the whole job, in hours."""
        return 24.0 / self.failures_per_day(n_gpus)


@dataclass(frozen=True)
class ZeroExample:
    """ZeRO's worked example: per-device GB of model states at each stage (baseline, 1, 2, 3)."""

    params: float
    dp: int
    stage_gb: tuple[float, ...]
    source: str


@lru_cache(maxsize=2)
def load_references(path: str | None = None) -> dict[str, Any]:
    """The raw reference file as a dict (cached); an unreadable file names itself."""
    where = Path(path) if path else REFERENCES_FILE
    return read_toml(where, "references file")


def _number(label: str, key: str, raw: dict) -> float:
    value = raw.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise LabkitError(f"{label}: {key} must be a non-negative number (got {value!r})")
    return value


def _text(label: str, key: str, raw: dict) -> str:
    value = raw.get(key)
    if not isinstance(value, str) or not value.strip():
        raise LabkitError(f"{label}: {key} must be a non-empty string (got {value!r})")
    return value


def failure_traces(path: str | None = None) -> list[FailureTrace]:
    """The published failure traces (Llama 3, OPT-175B), checked field by field."""
    out = []
    for i, raw in enumerate(load_references(path).get("failure_trace", [])):
        label = f"failure_trace {raw.get('name', f'#{i + 1}')!r}"
        counts = {k: int(_number(label, k, raw)) for k in ("gpus", "interruptions", "unexpected")}
        if counts["gpus"] == 0 or _number(label, "days", raw) == 0:
            raise LabkitError(f"{label}: gpus and days must be positive")
        if counts["unexpected"] > counts["interruptions"]:
            raise LabkitError(f"{label}: unexpected must be at most interruptions={counts['interruptions']}")
        share = raw.get("hardware_share")
        if share is not None and not 0 <= _number(label, "hardware_share", raw) <= 1:
            raise LabkitError(f"{label}: hardware_share must be in [0, 1] (got {share!r})")
        out.append(FailureTrace(
            name=_text(label, "name", raw), gpu=_text(label, "gpu", raw), days=float(raw["days"]),
            source=_text(label, "source", raw), hardware_share=share, note=str(raw.get("note", "")), **counts,
        ))  # fmt: skip
    return out


@dataclass(frozen=True)
class LargestModelRow:
    """One row of ZeRO's Table 2: the largest parameter count per stage (baseline, 1, 2, 3) as printed."""

    mp: int
    gpus: int
    params: tuple[float, ...]
    device_gb: float
    source: str

    @property
    def dp(self) -> int:
        return self.gpus // self.mp


def zero_examples(path: str | None = None) -> list[ZeroExample]:
    """ZeRO's per-stage example of Figure 1 (7.5 bn parameters on 64 GPUs: 120 / 31.4 / 16.6 / 1.9 GB)."""
    zero = load_references(path)["zero"]
    return [ZeroExample(float(e["params"]), int(e["dp"]), tuple(e["stage_gb"]), e["source"])
            for e in zero.get("example", [])]  # fmt: skip


def zero_table2(path: str | None = None) -> list[LargestModelRow]:
    """ZeRO's Table 2 (SC 2020): the largest model per stage on 32 GB V100s, model states only, as printed."""
    t = load_references(path)["zero"]["table2"]
    cols = [t[k] for k in ("baseline", "stage1", "stage2", "stage3")]
    if not all(len(c) == len(t["mp"]) == len(t["gpus"]) for c in cols):
        raise LabkitError("zero.table2: mp, gpus and every stage column must have the same length")
    return [LargestModelRow(int(mp), int(g), tuple(float(c[i]) for c in cols), float(t["device_gb"]), t["source"])
            for i, (mp, g) in enumerate(zip(t["mp"], t["gpus"], strict=True))]  # fmt: skip


def section(name: str, path: str | None = None) -> dict[str, Any]:
    """One table of the file (``zero``, ``activations``, ``energy_pj``, ...), by name."""
    refs = load_references(path)
    tables = [k for k, v in refs.items() if isinstance(v, dict)]
    if name not in tables:
        raise LabkitError(f"section must be one of {', '.join(tables)} (got {name!r})")
    return refs[name]


def headline(system: str, path: str | None = None) -> dict[str, Any]:
    """A headline result (vDNN, ZeRO-Offload, ...) with its claim and source."""
    items = load_references(path).get("headline", [])
    for item in items:
        if item["system"].lower() == str(system).lower():
            return item
    raise LabkitError(f"system must be one of {', '.join(i['system'] for i in items)} (got {system!r})")
