"""The trends notebook 04's prose claims of its predicted tables, as booleans the notebook asserts (issue 40).

Each function takes the figures a cell of notebook 04 prints and returns ``{claim: held}``, one entry per
sentence of the text under that table, so that a change to the simulator, the catalogue or a planner
that turns a sentence false stops the notebook where the sentence is printed (``assert all(...)``), not
a reader who compares. Every figure here is predicted (``labkit.sim``-style replays of catalogue
hardware), so none depends on how busy this machine is.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from labkit.errors import LabkitError
from labkit.offload.flashneuron import Report
from labkit.offload.swap_sweep import Point

SEVERAL = 2.0  # "several times slower than compute": a slowdown of more than 200% (3x the compute time)
FEW_POINTS = 0.1  # "within a few points": at most 10 percentage points of compute apart


def vdnn_scaling(rows: Mapping[int, tuple[float, float, float]]) -> dict[str, bool]:
    """Section 4 (vDNN at scale): rows of ``batch -> (bytes per layer, step seconds, seconds waiting)``.

    The text: four times the batch gives four times the bytes, the step and the wait (both grow with
    b*s*h*(...) so the ratio is set by h and the link), and the A100 waits at every batch.
    """
    (b1, (bytes1, step1, wait1)), (b2, (bytes2, step2, wait2)) = sorted(rows.items())[:2]
    k = b2 / b1

    def scaled(a: float, b: float) -> bool:
        return abs(b - k * a) <= 0.02 * k * a

    return {f"{k:g}x the batch: {k:g}x the bytes": scaled(bytes1, bytes2),
            f"{k:g}x the batch: {k:g}x the step": scaled(step1, step2),
            f"{k:g}x the batch: {k:g}x the wait": scaled(wait1, wait2),
            "the A100 waits at every batch": all(w > 0 for _, _, w in rows.values())}


def swap_planners(points: Sequence[Point]) -> dict[str, bool]:
    """Section 5 (three swap planners over the oversubscription r): the claims of "Read the rows"."""
    first, last = points[0], points[-1]
    middle = [p for p in points if 1.1 <= p.ratio <= 2.0]
    seeds = len(first.ga)
    return {
        "just over budget, the worst seed is slower than greedy": max(first.ga) > first.greedy,
        "from 1.1x to 2x every seed beats greedy": all(p.ga_beats_greedy == seeds for p in middle),
        "greedy swaps attention ops only": all(p.greedy_swaps.get("mlp", 0) == 0 for p in points),
        "most seeds swap MLP ops too (1.1x to 2x)": all(2 * sum(g.get("mlp", 0) > 0 for g in p.ga_swaps) > seeds
                                                       for p in middle),
        "at the largest r the search's median is within a few points of greedy":
            abs(last.ga_median - last.greedy) <= FEW_POINTS,
        "at the largest r every plan is several times slower than compute":
            min(*last.ga, last.greedy) > SEVERAL,
        "vDNN's rule pays the same, highest price at every r":
            len({round(p.vdnn, 9) for p in points}) == 1 and all(p.vdnn >= max(*p.ga, p.greedy) for p in points),
    }


def flashneuron_rule(own: Report, sweep: Sequence[Report], shares: Mapping[int, float],
                     share_here: float, share_batch1: float) -> dict[str, bool]:
    """Section 8 (FlashNeuron): ``own`` at its own slack, ``sweep`` over slacks, ``shares`` by hidden size.

    ``share_here`` and ``share_batch1`` are GPT-2 medium's hiding shares at the batch of the `why` line and at
    batch 1 (the width list).
    """
    grown = [r for r in sweep if r.batch_offload > r.batch_no_offload]
    widths = [shares[h] for h in sorted(shares)]
    return {
        "at its own slack the rule buys no batch": own.batch_offload == own.batch_no_offload,
        "only a few per cent of the activations hide": share_here < 0.1,
        "the batch grows only when the rule is given up": bool(grown) and all(r.slack > own.slack for r in grown),
        "then each step slows by multiples and throughput falls": all(
            r.overhead > 1 and r.throughput_offload < r.throughput_no_offload for r in grown),
        "the share that hides grows with the width": all(a < b for a, b in zip(widths, widths[1:], strict=False)),
        "the share does not depend on the batch": abs(share_here - share_batch1) < 1e-9,
    }


def mobius_sweep(first: Mapping[str, object], rows: Sequence[Mapping[str, object]], claim: str) -> dict[str, bool]:
    """Section 8 (Mobius): ``first`` is ``mobius.compare``'s line, ``rows`` its batch sweep, ``claim`` the paper's
    headline (its "3.8-5.1x" range is read from it)."""
    found = re.search(r"(\d+(?:\.\d+)?)-(\d+(?:\.\d+)?)x", claim)
    if not found:
        raise LabkitError(f"claim must state a range such as '3.8-5.1x' (got {claim!r})")
    paper = (float(found[1]), float(found[2]))
    speed = [float(r["zero_offload_s"]) / float(r["mobius_s"]) for r in rows]  # >1: Mobius faster
    slower = [s for s, r in zip(speed, rows, strict=True) if r["faster"] == "ZeRO"]
    return {
        "Mobius moves several times fewer bytes": float(first["zero_offload_gb"]) / float(first["mobius_gb"]) > 3,
        "at the smallest batch Mobius wins by a factor inside the paper's range": paper[0] <= speed[0] <= paper[1],
        "the lead shrinks as the batch grows, until ZeRO is faster": speed[0] > speed[1] > 1 > speed[2],
        "at large batches Mobius is slightly slower (within 10%)": bool(slower) and all(0.9 <= s < 1 for s in slower)
        and all(r["faster"] == "ZeRO" for r in rows[2:]),
    }
