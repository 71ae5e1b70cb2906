"""Text tables of notebook 02: measured beside predicted for ZeRO, pipelines and PipeDream.

Formatting only; the numbers come from ``zero``, ``pipeline``, ``bubble`` and ``pipedream``
(measured) and from ``labkit.predict.estimate`` and ``labkit.sim`` (predicted). Bytes are "B";
collectives are counted in elements.
"""

from __future__ import annotations

from labkit.inter_layer import bubble
from labkit.inter_layer.pipedream import StageReport
from labkit.inter_layer.pipedream_runs import error_summary
from labkit.inter_layer.pipeline import PipelineRun
from labkit.inter_layer.zero import RankResult, compare
from labkit.predict.tables import text_table
from labkit.sim import bubble_fraction


def zero_table(results: dict[str, list[RankResult]], rank: int = 0) -> str:
    """Bytes held and elements sent per step by one rank of each strategy (measured, torch's model, the paper).

    The unit column says which: held state in bytes (B), collectives in elements (fp32 values, 4 B each)
    counted as the paper counts them (``zero.volume``: an all-reduce counts twice in "comm volume").
    """
    rows = []
    for strategy, ranks in results.items():
        for r in compare([ranks[rank]]):
            paper = "-" if r.paper is None else f"{r.paper:,.0f}"
            unit = "elements" if r.unit == "elements" else "B"
            rows.append([strategy, r.name, unit, f"{r.measured:,.0f}", f"{r.predicted:,.0f}", paper])
    return text_table(["strategy", f"rank {rank}", "unit", "measured", "predicted", "paper (ZeRO)"], rows)


def worst_zero_error(results: dict[str, list[RankResult]]) -> float:
    """Largest |measured - predicted| over every rank, category and collective (0 when the model is exact)."""
    return max(abs(r.measured - r.predicted) for ranks in results.values() for r in compare(ranks))


def pipeline_table(runs: dict[str, PipelineRun]) -> str:
    """Peak activations per rank in micro-batches: measured beside what the schedule's order implies."""
    rows = []
    for label, run in runs.items():
        measured = ", ".join(f"{x:.2f}" for x in run.peak_microbatches)
        predicted = ", ".join(f"{x:.2f}" for x in run.predicted_microbatches)
        rows.append([label, measured, predicted])
    return text_table(["schedule", "peak held, per rank (measured)", "predicted by the schedule"], rows)


def pipedream_table(modes: dict[str, list[StageReport]]) -> str:
    """Weight versions held per stage and their bytes, for each stashing mode (measured)."""
    rows = []
    for mode, stages in modes.items():
        for s in stages:
            rows.append([mode, s.rank, s.max_versions, f"{s.stage_param_bytes:,}", f"{s.max_stash_bytes:,}"])
    return text_table(["stash", "stage", "versions held", "B per version", "B held"], rows)


def bubble_formula_table(cases: list[tuple[str, int, int, int]]) -> str:
    """(p-1)/(v*m+p-1) beside ``labkit.sim``'s replay with equal stages (backward = 2 x forward): deterministic."""
    rows = [[bubble.label(kind, p, m, v), f"{100 * bubble_fraction(p, m, v):.1f}%",
             f"{100 * bubble.simulated(kind, p, m, v):.1f}%"] for kind, p, m, v in cases]
    return text_table(["schedule", "(p-1)/(v*m+p-1)", "simulated, equal stages"], rows)


def gradient_error_table(grid: dict[tuple[float, str], list[StageReport]]) -> str:
    """Relative error of the gradient each stage applied against the true one, median and largest (measured)."""
    rows = []
    for (lr, mode), stages in grid.items():
        for s, (mid, top) in zip(stages, error_summary(stages), strict=True):
            rows.append([f"{lr:g}", mode, s.rank, f"{100 * mid:.1f}%", f"{100 * top:.1f}%"])
    return text_table(["lr", "stash", "stage", "gradient error, median", "largest"], rows)
