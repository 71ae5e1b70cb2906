"""A whole training run, costed: time, dollars, kWh, kg CO2 and SSD wear, for each strategy side by side.

``cost_run`` turns one ``strategies.plan`` into totals over the token budget: steps =
tokens / batch tokens; energy = ``energy.step_energy`` x steps (IT), times PUE for the
facility; carbon = facility kWh x the grid's intensity; rented dollars = GPU-hours x the
on-demand price; owned dollars = the amortised share of GPUs, host DRAM and the offload
SSDs (CPUs, chassis and network left out), plus electricity, plus worn-out SSDs replaced.
``compare`` does the three strategies and ``winners`` says which is lowest on each metric.
"""

from __future__ import annotations

from dataclasses import dataclass

from labkit import hardware
from labkit.economics import capital, energy, grid, strategies, wear
from labkit.errors import LabkitError, require_positive
from labkit.shapes import model_shape

METRICS = ("days", "cloud_usd", "owned_usd", "facility_kwh", "kg_co2", "gpus", "ssd_life_used")


@dataclass(frozen=True)
class RunCost:
    """Totals of one strategy over a token budget; energy is IT energy, ``facility_kwh`` includes PUE."""

    plan: strategies.Plan
    tokens: float
    steps: float
    time_s: float
    energy: energy.Energy
    pue: float
    g_co2_per_kwh: float
    usd_per_kwh: float
    cloud_usd: float
    capex_usd: float
    owned_usd: float
    wear: wear.Wear | None

    @property
    def strategy(self) -> str:
        return self.plan.strategy

    @property
    def gpus(self) -> int:
        return self.plan.gpus

    @property
    def days(self) -> float:
        return self.time_s / 86400.0

    @property
    def facility_kwh(self) -> float:
        return grid.joules_to_kwh(self.energy.facility_j(self.pue))

    @property
    def kg_co2(self) -> float:
        return grid.carbon_kg(self.energy.facility_j(self.pue), self.g_co2_per_kwh)

    @property
    def ssd_life_used(self) -> float:
        return 0.0 if self.wear is None else self.wear.life_used

    @property
    def ssd_embodied_kg(self) -> float:
        """The offload SSDs' embodied carbon this run uses up: their manufacture (kg CO2e/GB, Tannu and Nair
        2022) times the larger of the share of their warranty the run lasts and the share of their
        endurance it writes (a drive worn out early is a drive made again)."""
        if self.wear is None:
            return 0.0
        tier = hardware.tier(self.wear.drive)
        years = tier.warranty_years or capital.LIFETIME_YEARS
        share = max(self.time_s / (years * capital.YEAR_S), self.wear.life_used)
        return self.wear.drives * tier.capacity_bytes / 1e9 * grid.embodied_kg_per_gb("ssd") * share

    def row(self) -> dict[str, float | int | str]:
        """The figures a table shows, in people's units (days, USD, kWh, kg, fraction of SSD life)."""
        return {"strategy": self.strategy, "gpus": self.gpus, "days": self.days, "cloud_usd": self.cloud_usd,
                "owned_usd": self.owned_usd, "facility_kwh": self.facility_kwh, "kg_co2": self.kg_co2,
                "ssd_life_used": self.ssd_life_used,
                "ssd_replacements": 0 if self.wear is None else self.wear.replacements}


def _step_traffic(p: strategies.Plan) -> energy.StepTraffic:
    t, psi = p.traffic, p.params
    return energy.StepTraffic(
        gpus=p.gpus, hosts=p.servers, busy_s=p.compute_s, stall_s=p.stall_s,
        host_busy_s=min(p.cpu_s, p.step_s), hbm_bytes=p.hbm_bytes,
        pcie_bytes=t.link * psi, peer_bytes=p.gpus * p.peer_bytes_per_gpu,
        dram_bytes=0.0 if p.strategy == "hbm" else t.optimizer * psi,
        ssd_read_bytes=t.nvme_read * psi, ssd_write_bytes=t.nvme_write * psi,
    )  # fmt: skip


def cost_run(strategy: str, model: str, tokens: float, gpu: str, *, region: str = "world",
             g_co2_per_kwh: float | None = None, pue: float | str = "industry-average",
             usd_per_kwh: float | None = None, cloud_usd_per_hour: float | None = None,
             lifetime_years: float = capital.LIFETIME_YEARS, idle_fraction: float = energy.IDLE_FRACTION,
             **plan_kwargs) -> RunCost:
    """Cost one strategy for ``tokens`` training tokens of ``model`` on ``gpu``; ``plan_kwargs`` go to ``plan``."""
    if isinstance(tokens, bool) or not isinstance(tokens, (int, float)) or not tokens > 0:
        raise LabkitError(f"tokens must be a positive number (got {tokens!r})")
    p = strategies.plan(strategy, model_shape(model), gpu, **plan_kwargs)
    cat = hardware.load_catalogue()
    host, dram, ssd = cat.host(p.host), cat.tier(p.dram), p.ssd
    r = energy.rates(p.gpu, host.name, dram.name, ssd, idle_fraction)
    steps = tokens / plan_kwargs.get("batch_tokens", strategies.BATCH_TOKENS)
    run_energy = energy.step_energy(_step_traffic(p), r).scaled(steps)
    time_s = p.step_s * steps
    intensity = grid.region(region).value if g_co2_per_kwh is None else g_co2_per_kwh
    pue_value = grid.pue(pue) if isinstance(pue, str) else pue
    if isinstance(pue_value, bool) or not isinstance(pue_value, (int, float)) or pue_value < 1:
        raise LabkitError(f"pue must be a number >= 1 or one of {', '.join(grid.names('pue'))} (got {pue!r})")
    price = grid.electricity_usd_per_kwh() if usd_per_kwh is None else usd_per_kwh
    w = None
    if p.drives:
        w = wear.ssd_wear(p.traffic.nvme_write * p.params * steps, p.drives, ssd)
    dram_bytes = getattr(host, "dram_bytes", 0) or host.sockets * dram.capacity_bytes
    capex = p.gpus * hardware.gpu(p.gpu).price_usd + p.servers * dram_bytes / 1e9 * dram.price_usd_per_gb + \
        (p.drives * w.drive_price_usd if w else 0.0)
    kwh = grid.joules_to_kwh(run_energy.facility_j(pue_value))
    owned = capital.amortised_usd(capex, time_s, lifetime_years) + capital.electricity_usd(kwh, price) + \
        (w.replacement_usd if w else 0.0)
    cloud = capital.cloud_usd(p.gpus, time_s, p.gpu, cloud_usd_per_hour)
    grid.carbon_kg(0.0, intensity)  # checks the intensity
    return RunCost(p, float(tokens), steps, time_s, run_energy, float(pue_value), float(intensity), float(price),
                   cloud, capex, owned, w)


def compare(model: str, tokens: float, gpu: str, gpus: dict[str, int] | None = None,
            traffic: dict[str, strategies.Traffic] | None = None, gpus_at_least: int = 0,
            **kwargs) -> dict[str, RunCost]:
    """The three strategies side by side; ``gpus`` and ``traffic`` may set a strategy's count or measured bytes.

    ``gpus_at_least`` gives every strategy at least that many GPUs (each still gets as many as
    its states need): the panel's "GPUs" control.
    """
    gpus, traffic = dict(gpus or {}), traffic or {}
    for key in [*gpus, *traffic]:
        if key not in strategies.STRATEGIES:
            raise LabkitError(f"strategy must be one of {', '.join(strategies.STRATEGIES)} (got {key!r})")
    if isinstance(gpus_at_least, bool) or not isinstance(gpus_at_least, int) or gpus_at_least < 0:
        raise LabkitError(f"gpus_at_least must be a whole number >= 0 (got {gpus_at_least!r})")
    if gpus_at_least:
        shape, dev = model_shape(model), hardware.gpu(gpu)
        seq = kwargs.get("seq") or shape.seq
        for s in strategies.STRATEGIES:
            if s not in gpus:
                fewest = strategies.min_gpus(s, shape, dev, seq, kwargs.get("micro_batch", 1))
                gpus[s] = max(gpus_at_least, fewest)
    return {s: cost_run(s, model, tokens, gpu, gpus=gpus.get(s), traffic=traffic.get(s), **kwargs)
            for s in strategies.STRATEGIES}


def winners(runs: dict[str, RunCost], rel_tol: float = 0.005) -> dict[str, tuple[str, ...]]:
    """For each metric, the strategies within ``rel_tol`` of the lowest value (several when they tie).

    Rented dollars often tie: offload trades GPUs for days, and GPU-hours stay the same.
    """
    require_positive("number of runs", len(runs))
    out = {}
    for m in METRICS:
        best = min(getattr(r, m) for r in runs.values())
        out[m] = tuple(s for s, r in runs.items() if getattr(r, m) <= best + abs(best) * rel_tol)
    return out
