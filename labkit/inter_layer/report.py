"""Text tables of notebook 02: measured beside predicted for ZeRO, pipelines and PipeDream.

Formatting only; the numbers come from ``zero``, ``pipeline`` and ``pipedream``
(measured) and from ``labkit.estimate`` and ``labkit.sim`` (predicted).
"""

from __future__ import annotations

from labkit.inter_layer.pipedream import StageReport
from labkit.inter_layer.pipeline import PipelineRun
from labkit.inter_layer.zero import RankResult, compare
from labkit.tables import text_table


def zero_table(results: dict[str, list[RankResult]], rank: int = 0) -> str:
    """Bytes held and elements sent per step by one rank of each strategy (measured, torch's model, the paper)."""
    rows = []
    for strategy, ranks in results.items():
        for r in compare([ranks[rank]]):
            paper = "-" if r.paper is None else f"{r.paper:,.0f}"
            rows.append([strategy, r.category, f"{r.measured:,.0f}", f"{r.predicted:,.0f}", paper])
    return text_table(["strategy", f"rank {rank}", "measured", "predicted", "paper (ZeRO)"], rows)


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


def bubble_table(runs: dict[str, PipelineRun]) -> str:
    """Measured bubble and step time beside (p-1)/(v*m+p-1); wall-clock, so never asserted."""
    rows = [[label, f"{100 * run.bubble:.0f}%", f"{100 * run.predicted_bubble:.0f}%",
             f"{1e3 * run.step_seconds:.0f} ms"] for label, run in runs.items()]
    return text_table(["schedule", "bubble (measured)", "(p-1)/(v*m+p-1)", "step (measured)"], rows)


def pipedream_table(modes: dict[str, list[StageReport]]) -> str:
    """Weight versions held per stage and their bytes, for each stashing mode (measured)."""
    rows = []
    for mode, stages in modes.items():
        for s in stages:
            rows.append([mode, s.rank, s.max_versions, f"{s.stage_param_bytes:,}", f"{s.max_stash_bytes:,}"])
    return text_table(["stash", "stage", "versions held", "bytes per version", "bytes held"], rows)
