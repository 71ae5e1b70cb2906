"""The trends notebook 03's prose claims of its predicted scaling tables, as booleans it asserts (issue 40).

Each function takes the cells a table of notebook 03 prints (``report.winner_cells``) and returns
``{claim: held}``, one entry per sentence of the text under the table, so that a change of the catalogue,
the link model or the cost count that turns a sentence false stops the notebook at that table. Every figure
is predicted, so none depends on how busy this machine is.
"""

from __future__ import annotations

from collections.abc import Sequence

from labkit.intra_layer.report import Winner

SMALL = 0.1  # "a small share of compute": under 10%
LARGE = 0.5  # "a large share": over half


def gpt3_block(cells: Sequence[Winner], domain: int, fast: str, slow: str) -> dict[str, bool]:
    """Section 5's first table: GPT-3's MLP block on ``fast`` (NVLink) and ``slow`` (InfiniBand) links."""
    on = {(c.devices, c.link): c for c in cells}
    counts = sorted({c.devices for c in cells})
    inside, beyond = [p for p in counts if p <= domain], [p for p in counts if p > domain]
    return {
        "inside the NVLink domain communication is a small share of compute":
            all(on[p, fast].share < SMALL for p in inside),
        "over InfiniBand it is a large share already at the domain's size": on[domain, slow].share > LARGE,
        "past the domain it exceeds compute on either link": bool(beyond) and all(
            on[p, link].share > 1 for p in beyond for link in (fast, slow)),
        "1D wins every cell": all(c.mode == "1d" for c in cells),
    }


def grid_modes_win(cells: Sequence[Winner]) -> dict[str, bool]:
    """Section 5's second table (many tokens, small h): a grid mode, not 1D, is the fastest in every cell."""
    return {"a grid mode wins every cell": bool(cells) and all(c.mode in ("2d", "2.5d", "3d") for c in cells)}
