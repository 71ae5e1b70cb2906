"""The checked design tasks of notebooks 07 (economics panel), 08 (crossbar panel) and 09 (advisor panel).

07 and 08 reuse the checks their panels define (``labkit.economics.panel.design_task``,
``labkit.future.panel.design_task``), imported only when a check runs, so this module stays
light. 09's task needs two results put together: the advisor's fastest step on a GPU count
turned into days for a whole pretraining run, and the same on half as many GPUs, because the
task asks for the FEWEST GPUs that meet a deadline. Its numbers follow Llama 2's pretraining
(Touvron et al., 2023: 2 trillion tokens and a 4k context in Table 1, a 4M-token batch in section 2.2).
"""

from __future__ import annotations

from labkit.teach.widgets import Panel

RUN_TOKENS = 2e12  # Llama 2's pretraining tokens (Touvron et al., 2023, Table 1)
MAX_DAYS = 30.0
SEQ = 4096
BATCH = 1024  # sequences: 1,024 x 4,096 = 4 Mi tokens, Llama 2's batch


def economics_check(panel: Panel) -> tuple[bool, str]:
    """Task 07: the economics panel's own check (SSD offload within 10% of all in HBM's carbon, worn drives'
    embodied carbon counted, in a run shorter than a year)."""
    from labkit.economics.panel import design_task

    return design_task().check(panel)


def economics_goal() -> str:
    """Task 07's goal, in the economics panel's own words."""
    from labkit.economics.panel import GOAL

    return GOAL


def economics_panel() -> Panel:
    from labkit.economics.panel import EconomicsPanel

    return EconomicsPanel()


def crossbar_check(panel: Panel) -> tuple[bool, str]:
    """Task 08: the crossbar panel's own check (under 1% output error at 2% read noise)."""
    from labkit.future.panel import design_task

    return design_task().check(panel)


def crossbar_panel() -> Panel:
    """The notebook's panel: the trained tiny GPT's layer at 2% read noise and 8-bit weights."""
    from labkit.future.crossbar import tiny_trainer
    from labkit.future.panel import CrossbarPanel

    return CrossbarPanel.from_trainer(tiny_trainer(), noise_percent=2.0, weight_bits=8)


def run_days(step_s: float, batch: int, seq: int) -> float:
    """Days to train RUN_TOKENS at ``step_s`` seconds per step of ``batch`` x ``seq`` tokens."""
    return RUN_TOKENS / (batch * seq) * step_s / 86400


def _days_on(panel: Panel, gpus: int) -> float | None:
    from labkit.advisor import search

    best = search.advise(panel.model.value, panel.batch.value, panel.gpu.value, gpus, "fastest",
                         seq=panel.seq.value).best
    return None if best is None else run_days(best.step_s, panel.batch.value, panel.seq.value)


def advisor_check(panel: Panel) -> tuple[bool, str]:
    """Task 09: Llama-2 70B, 2 trillion tokens in under 30 days on the fewest H100s (a power of two)."""
    a = panel.advice
    if a is None:
        return False, "the panel has no valid result: fix the input it names"
    n = panel.gpus.value
    wants = {"model is llama2-70b": panel.model.value == "llama2-70b",
             "GPU is the H100-SXM": panel.gpu.value == "H100-SXM",
             f"sequence is {SEQ}": panel.seq.value == SEQ, f"global batch is {BATCH:,}": panel.batch.value == BATCH,
             "goal is fastest": panel.goal.value == "fastest", "GPUs a power of two": n > 0 and n & (n - 1) == 0}
    missing = [k for k, ok in wants.items() if not ok]
    if missing:
        return False, "the task asks for: " + ", ".join(missing)
    if a.best is None:
        return False, f"no plan fits on {n:,} GPUs: more GPUs"
    days = run_days(a.best.step_s, BATCH, SEQ)
    if days >= MAX_DAYS:
        return False, f"{days:.1f} days on {n:,} GPUs (predicted); the task asks for under {MAX_DAYS:.0f}: more GPUs"
    half = _days_on(panel, n // 2) if n > 1 else None
    if half is not None and half < MAX_DAYS:
        return False, (f"{days:.1f} days on {n:,} GPUs, but {n // 2:,} already take {half:.1f} days (predicted): "
                       "the task asks for the fewest")
    if n == 1:
        return True, f"{days:.1f} days on one GPU (predicted)"
    on_half = "no plan fits" if half is None else f"it would take {half:.1f} days"
    return True, f"{days:.1f} days on {n:,} GPUs (predicted); on {n // 2:,} {on_half}"


def advisor_panel() -> Panel:
    from labkit.advisor.panel import AdvisorPanel

    return AdvisorPanel()
