"""What one rank holds and moves in 1D, 2D, 2.5D and 3D tensor parallelism, priced, published and ranked.

A concept in four parts, each its own module: ``grid`` (how the ranks are arranged and what sizes
each grid needs), ``ops`` (the collectives and bytes of one linear layer and of the MLP block, as
``multidim`` runs them), ``tables`` (Colossal-AI's published efficiency tables beside this
model's terms) and ``modes`` (every mode on a link, ranked by seconds and by bytes held). The
collectives' seconds are ``labkit.predict.collectives``, the one ring model of labkit.
"""

from labkit.intra_layer.costs.grid import MODES, Grid, check, divisors, grid
from labkit.intra_layer.costs.modes import ModeChoice, comm_seconds, rank_modes
from labkit.intra_layer.costs.ops import (
    BLOCKS,
    PHASES,
    Collective,
    Cost,
    comm_table,
    cost,
    linear,
    mlp,
    ratios,
    single_device,
)
from labkit.intra_layer.costs.tables import PUBLISHED_LEFT_OUT, SOURCE, published, table_comm

__all__ = ["BLOCKS", "MODES", "PHASES", "PUBLISHED_LEFT_OUT", "SOURCE", "Collective", "Cost", "Grid", "ModeChoice",
           "check", "comm_seconds", "comm_table", "cost", "divisors", "grid", "linear", "mlp", "published",
           "rank_modes", "ratios", "single_device", "table_comm"]
