"""labkit's prediction beside a published training run: Llama 2's GPU-hours and tonnes of CO2e.

Touvron et al. (2023, Table 2) report each Llama 2 model's pretraining as GPU-hours on
A100-80GB, a per-GPU power, and tonnes of CO2e (``datasets/published_runs.toml``). Their
tonnes are GPU-hours x that power x a carbon factor: the factor their figures imply
(``implied_g_co2_per_kwh``) is computed here, not typed in. labkit predicts the same run
with ``run.cost_run`` (all in HBM, ZeRO-3, its MFU, its whole-server energy, a PUE and a
grid), and the ratio of the two splits exactly into three factors, each one assumption:

* GPU-hours: labkit's MFU against the one Meta's hours imply (``implied_mfu``);
* energy per GPU-hour: labkit's facility kWh per GPU-hour (GPU at TDP while busy, hosts,
  links, drives, times PUE) against Meta's power per GPU;
* grid: labkit's gCO2e/kWh against Meta's implied factor.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from labkit import hardware
from labkit.economics import run
from labkit.errors import LabkitError, read_toml
from labkit.measure.record import Record
from labkit.predict.estimate import training_flops
from labkit.shapes import model_shape

RUNS_FILE = Path(__file__).resolve().parent.parent.parent / "datasets" / "published_runs.toml"
_NUMBERS = ("tokens", "gpu_hours", "power_w", "t_co2")


@dataclass(frozen=True)
class PublishedRun:
    """One run as its paper reports it."""

    name: str
    model: str  # a labkit model shape, or "" when labkit has none
    gpu: str
    tokens: float
    gpu_hours: float
    power_w: float
    t_co2: float
    source: str
    note: str = ""

    @property
    def kwh(self) -> float:
        """GPU-hours x the paper's power per GPU."""
        return self.gpu_hours * self.power_w / 1000.0

    @property
    def implied_g_co2_per_kwh(self) -> float:
        """The carbon factor the paper's tonnes imply: t CO2e / (GPU-hours x power)."""
        return self.t_co2 * 1e6 / self.kwh

    def implied_mfu(self) -> float:
        """Model FLOPs of the run over the GPU-hours at the GPU's dense bf16 peak (labkit's FLOP count)."""
        if not self.model:
            raise LabkitError(f"model: labkit has no shape for {self.name} (got no model)")
        shape = model_shape(self.model)
        flops = training_flops(shape, shape.seq, 1) * self.tokens / shape.seq
        return flops / (self.gpu_hours * 3600 * hardware.gpu(self.gpu).peak_flops["bf16"])


@lru_cache(maxsize=2)
def load_runs(path: str | None = None) -> tuple[PublishedRun, ...]:
    """Every run of the file, checked field by field."""
    data = read_toml(Path(path) if path else RUNS_FILE, "published runs file")
    out = []
    for i, raw in enumerate(data.get("run", [])):
        label = f"run {raw.get('name', f'#{i + 1}')!r}"
        for key in _NUMBERS:
            value = raw.get(key)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                    or value <= 0:
                raise LabkitError(f"{label}: {key} must be a positive number (got {value!r})")
        if not str(raw.get("source", "")).strip():
            raise LabkitError(f"{label}: source must be a non-empty string")
        out.append(PublishedRun(raw["name"], str(raw.get("model", "")), raw["gpu"],
                                *(float(raw[k]) for k in _NUMBERS), raw["source"], str(raw.get("note", ""))))
    return tuple(out)


@dataclass(frozen=True)
class Beside:
    """labkit's prediction of a published run, and the three factors that make up their ratio."""

    paper: PublishedRun
    predicted: run.RunCost

    @property
    def gpu_hours(self) -> float:
        return self.predicted.gpus * self.predicted.time_s / 3600

    @property
    def t_co2(self) -> float:
        return self.predicted.kg_co2 / 1000

    @property
    def records(self) -> tuple[Record, Record]:
        """The paper's GPU-hours and tonnes (a real run's) beside labkit's prediction of them."""
        p, where = self.paper, (("run", self.paper.name),)
        return (Record("GPU-hours", p.gpu_hours, self.gpu_hours, "GPU-hours", "labkit.economics.run.cost_run",
                       p.gpu_hours, p.source, where),
                Record("t CO2e", p.t_co2, self.t_co2, "tonnes", "labkit.economics.run.cost_run", p.t_co2, p.source,
                       where))

    @property
    def factors(self) -> dict[str, float]:
        """labkit / paper, split: GPU-hours x energy per GPU-hour x grid (their product is the ratio of tonnes)."""
        p = self.paper
        kwh_per_gpu_hour = self.predicted.facility_kwh / self.gpu_hours
        return {"GPU-hours": self.gpu_hours / p.gpu_hours,
                "kWh per GPU-hour": kwh_per_gpu_hour / (p.power_w / 1000),
                "gCO2e per kWh": self.predicted.g_co2_per_kwh / p.implied_g_co2_per_kwh}


def beside(region: str = "world", pue: float | str = "industry-average", gpus: int = 64, **kwargs) -> list[Beside]:
    """labkit's prediction of every published run it has a shape for (all in HBM, on the paper's GPU).

    The papers give no GPU count per model; ``gpus`` (full servers of 8) sets one. While no GPU
    waits, GPU-hours do not depend on it; the hosts' share does (one host per 8 GPUs).
    """
    return [Beside(p, run.cost_run("hbm", p.model, p.tokens, p.gpu, region=region, pue=pue, gpus=gpus, **kwargs))
            for p in load_runs() if p.model]
