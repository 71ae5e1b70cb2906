"""What keeping bytes on a tier costs over a run: the share of the hardware's price and of its embodied carbon.

A run that keeps its checkpoints and its data set on a tier for ``seconds`` uses up that share
of the capacity's service life. Both the purchase price ($/GB, ``capital.usd_per_gb``) and the
carbon emitted to manufacture it (kg CO2e/GB, ``grid.embodied_kg_per_gb``, from a published
life-cycle assessment) are spread evenly over the same life (straight-line, an assumption:
``capital.LIFETIME_YEARS``). HBM's $/GB is the whole GPU's price over its memory; DRAM and
HBM have no embodied figure in the lab's data, so theirs is reported as unknown (None), not zero.
"""

from __future__ import annotations

from dataclasses import dataclass

from labkit.economics import capital, grid
from labkit.errors import LabkitError, require_choice

GB = 1e9


@dataclass(frozen=True)
class Holding:
    """``nbytes`` kept on ``tier`` for ``seconds``: the purchase and embodied shares that time uses up."""

    tier: str
    nbytes: float
    seconds: float
    usd: float
    kg_co2e: float | None  # None: no published per-GB figure in datasets/grid.toml

    @property
    def purchase_usd(self) -> float:
        """The price of the whole capacity (not only the share this run uses)."""
        return self.nbytes / GB * capital.usd_per_gb(self.tier)


def embodied_kg(nbytes: float, tier: str) -> float | None:
    """kg CO2e to manufacture ``nbytes`` of ``tier``; None where the data has no figure (DRAM, HBM)."""
    require_choice("tier", tier, capital.TIERS)
    try:
        per_gb = grid.embodied_kg_per_gb(tier)
    except LabkitError:
        return None
    return nbytes / GB * per_gb


def hold(nbytes: float, tier: str, seconds: float, lifetime_years: float = capital.LIFETIME_YEARS) -> Holding:
    """Keep ``nbytes`` on ``tier`` ("hbm", "dram", "ssd", "hdd") for ``seconds``: amortised $ and embodied kg."""
    usd = capital.amortised_usd(capital.holding_cost_usd(nbytes, tier), seconds, lifetime_years)
    made = embodied_kg(nbytes, tier)
    share = capital.amortised_usd(1.0, seconds, lifetime_years)  # fraction of the life used
    return Holding(tier, float(nbytes), float(seconds), usd, None if made is None else made * share)


def hold_all(nbytes: float, seconds: float, lifetime_years: float = capital.LIFETIME_YEARS) -> list[Holding]:
    """The same bytes on every tier, fastest first."""
    return [hold(nbytes, t, seconds, lifetime_years) for t in capital.TIERS]
