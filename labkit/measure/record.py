"""Measured beside predicted: the one record every topic reports a checked figure in.

The course's spine is a figure read off a real run (``measured``) next to the figure a model
gives for the same run (``predicted``), and, where a paper publishes one, the paper's (``paper``).
Every topic builds its comparison rows from :class:`Record`, so a table, a notebook's ``assert``
and a test read the same fields and the same error.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Record:
    """One figure: measured on a real run beside its prediction.

    ``name`` says what was measured ("parameters", "comm all_gather elements"), ``unit`` its unit
    ("bytes", "elements", "calls"), ``source`` what predicted it (a paper, torch's layout, labkit's
    model), ``paper`` the published figure where there is one, ``note`` a remark for the table and
    ``where`` the run it belongs to as ``(key, value)`` pairs (a strategy, a rank, a layout).
    """

    name: str
    measured: float
    predicted: float
    unit: str = ""
    source: str = ""
    paper: float | None = None
    note: str = ""
    where: tuple[tuple[str, Any], ...] = ()

    @property
    def error(self) -> float:
        """Relative error of the prediction against the measurement: (predicted - measured) / measured."""
        if self.measured == 0:
            return 0.0 if self.predicted == 0 else float("inf")
        return (self.predicted - self.measured) / self.measured

    @property
    def difference(self) -> float:
        """predicted - measured, in ``unit``."""
        return self.predicted - self.measured

    @property
    def ratio(self) -> float:
        """measured / predicted (1 when they agree; inf when only the measurement is non-zero)."""
        if self.predicted == 0:
            return 1.0 if self.measured == 0 else float("inf")
        return self.measured / self.predicted

    def at(self, key: str) -> Any:
        """The value of ``key`` in ``where`` (the run this figure belongs to)."""
        return dict(self.where)[key]
