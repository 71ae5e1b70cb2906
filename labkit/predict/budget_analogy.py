"""A micro-scale "device" that is to the tiny GPT what a real card is to a real model.

The analogy only teaches if it holds: a budget that is 4.7 times the tiny model's
states says nothing about a card that holds a fifth of a 7-bn-parameter model's. So
the budget is computed, not chosen: the same fraction of the tiny model's model
states (parameters, gradients, optimizer states) as the real card's capacity is of
the real model's states, both counted at 16 bytes per parameter (ZeRO's mixed-precision
Adam, Rajbhandari et al., SC 2020, and fp32 AdamW's 4 + 4 + 8 for the tiny model).
"""

from __future__ import annotations

from dataclasses import dataclass

from labkit.errors import require_positive


@dataclass(frozen=True)
class ScaledBudget:
    """A real card against a real model's states, and the micro budget with the same ratio (bytes)."""

    real_capacity_bytes: int
    real_states_bytes: int
    micro_states_bytes: int

    @property
    def real_ratio(self) -> float:
        """The card's capacity over the real model's states (below 1: the states alone do not fit)."""
        return self.real_capacity_bytes / self.real_states_bytes

    @property
    def budget_bytes(self) -> int:
        """The micro device: the same ratio of the tiny model's states, rounded to a byte."""
        return max(1, round(self.real_ratio * self.micro_states_bytes))

    @property
    def micro_ratio(self) -> float:
        """The micro budget over the tiny model's states: equal to ``real_ratio`` up to the rounding."""
        return self.budget_bytes / self.micro_states_bytes


def scaled_budget(real_capacity_bytes: int, real_states_bytes: float, micro_states_bytes: int) -> ScaledBudget:
    """The micro budget that stands to ``micro_states_bytes`` as a card stands to a real model's states."""
    require_positive("real_capacity_bytes", real_capacity_bytes)
    require_positive("real_states_bytes", real_states_bytes, integer=False)
    require_positive("micro_states_bytes", micro_states_bytes)
    return ScaledBudget(real_capacity_bytes, round(real_states_bytes), micro_states_bytes)
