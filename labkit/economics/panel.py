"""The design widget of notebook 07: model, tokens, GPU, GPU count, batch, strategy, price, grid -> costs.

The GPU count is a floor: each strategy gets at least that many GPUs, and more where its
states need them (0: as few as hold them). The batch sets how much compute each step has to
hide its transfers behind. Every change recosts the three strategies with ``labkit.economics.run.compare`` and draws one
bar chart per metric (days, rented dollars, facility MWh, tonnes CO2e, SSD lifetimes used), the
chosen strategy in red. The message gives the chosen strategy's figures. Bad input (no tokens,
a negative price, an unknown region) shows the message naming the field, never a traceback.
"""

from __future__ import annotations

import math

import ipywidgets as w
import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from labkit import hardware
from labkit.economics import grid
from labkit.economics.run import RunCost, compare
from labkit.economics.strategies import BATCH_TOKENS, STRATEGIES
from labkit.errors import LIMITS, LabkitError, require_choice
from labkit.shapes import model_names, model_shape
from labkit.teach.widgets import DesignTask, Panel, fit_html

CUSTOM = "custom"
_BARS = (("days", "days", 1.0), ("cloud_usd", "rented, k$", 1e-3), ("facility_kwh", "facility, MWh", 1e-3),
         ("kg_co2", "t CO2e", 1e-3), ("ssd_life_used", "SSD lifetimes used", 1.0))


def _mass(kg: float) -> str:
    return f"{kg / 1e3:,.1f} t" if kg >= 1e3 else f"{kg:,.0f} kg"


def panel_gpus() -> list[str]:
    """GPUs the panel can cost: those with a cloud price and a memory energy in the catalogue."""
    return [g.name for g in hardware.load_catalogue().gpus
            if g.cloud_usd_per_hour is not None and g.memory_energy_j_per_bit is not None]


WITHIN = 0.10  # the design task: SSD offload, its worn drives' embodied carbon counted, within 10% of all in HBM


def ssd_carbon_ratio(runs: dict[str, RunCost]) -> float:
    """SSD offload's operating carbon plus the embodied carbon of the drives it wears, over all in HBM's."""
    ssd, hbm = runs["ssd-offload"], runs["hbm"]
    return (ssd.kg_co2 + ssd.ssd_embodied_kg) / hbm.kg_co2 if hbm.kg_co2 else float("inf")


def ssd_against_hbm(runs: dict[str, RunCost]) -> str:
    """The design task's yardstick: SSD offload's carbon (embodied share of its worn drives included) beside
    all-in-HBM's."""
    if runs["hbm"].kg_co2 == 0:
        return "no carbon on this grid"
    ratio = ssd_carbon_ratio(runs)
    verdict = f"within {WITHIN:.0%}" if ratio <= 1 + WITHIN else f"more than {WITHIN:.0%} over"
    return (f"SSD offload emits {ratio:.3f}x the carbon of all in HBM, its worn drives' embodied share counted "
            f"({verdict})")


class EconomicsPanel(Panel):
    """Three ways to train one model on a token budget, costed in time, money, energy, carbon and SSD wear."""

    def __init__(self, model: str = "llama2-7b", tokens_billion: float = 1000.0, gpu: str = "H100-SXM",
                 strategy: str = "dram-offload", usd_per_kwh: float | None = None, region: str = "world",
                 g_co2_per_kwh: float = 400.0, gpus: int = 0, batch_k_tokens: float = BATCH_TOKENS / 1024) -> None:
        st = self.STYLE
        regions = [*grid.names("region"), CUSTOM]
        choices = panel_gpus()
        self.model = w.Dropdown(options=model_names(), value=model_shape(model).name, description="model", style=st)
        self.tokens = w.FloatText(value=tokens_billion, description="tokens (1e9)", style=st)
        self.gpu = w.Dropdown(options=choices, value=require_choice("gpu", hardware.gpu(gpu).name, choices),
                              description="GPU", style=st)
        self.gpus = w.IntText(value=gpus, description="GPUs, at least (0: fewest)", style=st)
        self.batch = w.FloatText(value=batch_k_tokens, description="batch (k tokens)", style=st)
        self.strategy = w.Dropdown(options=list(STRATEGIES), value=require_choice("strategy", strategy, STRATEGIES),
                                   description="strategy", style=st)
        price = grid.electricity_usd_per_kwh() if usd_per_kwh is None else usd_per_kwh
        self.price = w.FloatText(value=price, description="$ per kWh", style=st)
        self.region = w.Dropdown(options=regions, value=require_choice("region", region, regions),
                                 description="grid", style=st)
        self.intensity = w.FloatText(value=g_co2_per_kwh, description="custom gCO2/kWh", style=st)
        self.runs: dict[str, RunCost] | None = None
        self._wire([self.model, self.tokens, self.gpu, self.gpus, self.batch, self.strategy, self.price, self.region,
                    self.intensity])

    @property
    def run(self) -> RunCost | None:
        """The chosen strategy's costs, or None after bad input."""
        return None if self.runs is None else self.runs[self.strategy.value]

    def compute(self) -> tuple[str, list[Figure]]:
        self.runs = None
        tokens = self.tokens.value
        if not isinstance(tokens, (int, float)) or not 0 < tokens < math.inf:
            raise LabkitError(f"tokens (1e9) must be a positive number (got {tokens!r})")
        price = self.price.value
        if not isinstance(price, (int, float)) or not 0 <= price < math.inf:
            raise LabkitError(f"$ per kWh must be a non-negative number (got {price!r})")
        if self.region.value == CUSTOM:
            intensity = self.intensity.value
            if not isinstance(intensity, (int, float)) or not 0 <= intensity < math.inf:
                raise LabkitError(f"custom gCO2/kWh must be a non-negative number (got {intensity!r})")
            where = f"a grid at {intensity:g} gCO2/kWh"
        else:
            intensity = grid.region(self.region.value).value
            where = f"{self.region.value} ({intensity:g} gCO2/kWh)"
        gpus, batch = self.gpus.value, self.batch.value
        if isinstance(gpus, bool) or not isinstance(gpus, int) or not 0 <= gpus <= LIMITS["gpus"]:
            raise LabkitError(f"GPUs, at least must be a whole number, 0 or more, at most {LIMITS['gpus']:,} "
                              f"(got {gpus!r})")
        if not isinstance(batch, (int, float)) or not 0 < batch <= LIMITS["batch"]:
            raise LabkitError(f"batch (k tokens) must be a positive number up to {LIMITS['batch']:,} (got {batch!r})")
        runs = compare(self.model.value, tokens * 1e9, self.gpu.value, g_co2_per_kwh=float(intensity),
                       usd_per_kwh=float(price), gpus_at_least=gpus, batch_tokens=max(1, round(batch * 1024)))
        self.runs = runs
        r = runs[self.strategy.value]
        wear = "no SSD wear" if r.wear is None else (
            f"SSDs {r.wear.life_used:.2f} lifetimes used, {r.wear.replacements} drives replaced")
        text = (f"{fit_html(True, f'{r.strategy}: {r.gpus} x {r.plan.gpu}')}, {r.days:,.0f} days, "
                f"${r.cloud_usd:,.0f} rented (${r.owned_usd:,.0f} owned), {r.facility_kwh / 1e3:,.1f} MWh, "
                f"{_mass(r.kg_co2)} CO2e on {where}; {wear}; {ssd_against_hbm(runs)} (predicted)")
        return text, [self.chart(runs, self.strategy.value, f"{self.model.value}, {tokens:g}e9 tokens (predicted)")]

    @staticmethod
    def chart(runs: dict[str, RunCost], highlight: str, title: str) -> Figure:
        """One small bar chart per metric, one bar per strategy; the highlighted strategy in red."""
        fig, axes = plt.subplots(1, len(_BARS), figsize=(11.0, 2.8))
        labels = list(runs)
        colors = ["#C44E52" if s == highlight else "#4C72B0" for s in labels]
        for ax, (metric, label, scale) in zip(axes, _BARS, strict=True):
            ax.bar(labels, [getattr(runs[s], metric) * scale for s in labels], color=colors)
            ax.set_title(label, fontsize=9)
            ax.tick_params(axis="x", labelrotation=40, labelsize=7)
            ax.tick_params(axis="y", labelsize=7)
        fig.suptitle(title, fontsize=10)
        fig.tight_layout()
        plt.close(fig)
        return fig


MAX_RUN_DAYS = 365  # a run longer than a year is no plan: the hardware would be replaced first (an assumption)
GOAL = (f"Find a setting where SSD offload emits within {WITHIN:.0%} of the carbon of all in HBM, counting the "
        f"embodied carbon of the drives it wears, in a run shorter than a year.")


def _ssd_near_hbm_carbon(panel: EconomicsPanel) -> tuple[bool, str]:
    """SSD offload's operating carbon plus the embodied carbon of the drives it wears, within ``WITHIN`` of all in
    HBM's operating carbon, for runs that end within ``MAX_RUN_DAYS``."""
    if panel.runs is None:
        return False, "the panel has no valid result: fix the input it names"
    run_ssd, run_hbm = panel.runs["ssd-offload"], panel.runs["hbm"]
    if max(run_ssd.days, run_hbm.days) > MAX_RUN_DAYS:
        return False, (f"the runs take {run_ssd.days:,.0f} (SSD offload) and {run_hbm.days:,.0f} (all in HBM) days: "
                       f"more than {MAX_RUN_DAYS} days is no plan; train on fewer tokens or more GPUs")
    ratio = ssd_carbon_ratio(panel.runs)
    worn = f"the embodied carbon of the drives it wears ({run_ssd.ssd_embodied_kg:,.0f} kg) counted"
    if ratio <= 1 + WITHIN:
        return True, f"SSD offload emits {ratio:.3f}x the carbon of all in HBM, {worn}"
    return False, (f"SSD offload still emits {ratio:.3f}x the carbon of all in HBM, {worn}: look for a model that "
                   "needs many GPUs over several servers, and a batch large enough that the drives hardly wear")


def design_task() -> DesignTask:
    """Notebook 07's task: SSD offload within ``WITHIN`` of all in HBM's carbon, worn drives' embodied carbon
    counted, in a run shorter than ``MAX_RUN_DAYS``."""
    return DesignTask(GOAL, _ssd_near_hbm_carbon)
