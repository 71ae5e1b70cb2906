"""The checked design tasks of notebooks 04 (offload timeline panel) and 05 (memory reduction panel).

The task asks for an iteration that fits a tight device budget AND stays within a given
multiple of compute alone, over a host link of bounded speed. On the V100's own PCIe 3
link no policy comes near (the activations of GPT-2 large take several times longer to
move than to compute); at four times that link vDNN's swap-everything rule still misses
while SwapAdvisor's searched plan (Huang et al., ASPLOS 2020) makes it: the learner finds
that the link sets the cost, and that choosing what to swap is worth a search.

05's task is the one the notebook sets in prose: Llama-2 7B at s = 4,096 on an A100-80GB,
fitted with the least compute recompute adds, over every combination of recompute,
precision and optimizer-state bits (``labkit.reduction.design.cheapest_fit``).
"""

from __future__ import annotations

from labkit.teach.widgets import Panel

OFFLOAD_MODEL, OFFLOAD_GPU, OFFLOAD_SEQ, OFFLOAD_BATCH = "gpt2-large", "V100-32GB", 1024, 4
OFFLOAD_BUDGET_GB, OFFLOAD_MAX_LINK_GBPS, OFFLOAD_MAX_SLOWDOWN = 16.0, 64.0, 1.5


def offload_slowdown(panel: Panel) -> float:
    """Iteration time over compute alone, minus one, of the panel's last simulated iteration."""
    from labkit import hardware
    from labkit.offload.iteration import compute_time, transformer_ops
    from labkit.shapes import model_shape

    ops = transformer_ops(model_shape(panel.model.value), panel.seq.value, panel.micro_batch.value,
                          hardware.gpu(panel.gpu.value).peak_flops["bf16"])
    return panel.result.time_s / compute_time(ops) - 1


def offload_check(panel: Panel) -> tuple[bool, str]:
    """Task 04: fits the 16 GB budget, at most 2.5x compute alone, over a host link of at most 64 GB/s."""
    wants = {"model is gpt2-large": panel.model.value == OFFLOAD_MODEL,
             "GPU is the V100-32GB": panel.gpu.value == OFFLOAD_GPU,
             "sequence is 1024": panel.seq.value == OFFLOAD_SEQ,
             "micro-batch is 4": panel.micro_batch.value == OFFLOAD_BATCH,
             "budget of at most 16 GB": panel.budget_gb.value <= OFFLOAD_BUDGET_GB,
             "host link of at most 64 GB/s": panel.link_gbps.value <= OFFLOAD_MAX_LINK_GBPS}
    missing = [k for k, ok in wants.items() if not ok]
    if missing:
        return False, "the task asks for: " + ", ".join(missing)
    if panel.result is None:
        return False, "the panel has no valid iteration: fix the input it names"
    over = panel.result.peak_bytes - panel.machine().capacity_bytes
    if over > 0:
        return False, f"out of memory by {over / 1e9:.1f} GB: the policy must swap more"
    slow = offload_slowdown(panel)
    if slow > OFFLOAD_MAX_SLOWDOWN:
        return False, (f"the iteration takes {1 + slow:.2f}x compute alone (simulated); the task asks for at most "
                       f"{1 + OFFLOAD_MAX_SLOWDOWN:.1f}x: a faster link, or a policy that moves fewer bytes")
    return True, f"fits, {1 + slow:.2f}x compute alone over {panel.link_gbps.value:g} GB/s (simulated)"


def offload_panel() -> Panel:
    from labkit.offload.panel import OffloadPanel

    return OffloadPanel(model=OFFLOAD_MODEL, gpu=OFFLOAD_GPU, seq=OFFLOAD_SEQ, micro_batch=OFFLOAD_BATCH,
                        budget_gb=OFFLOAD_BUDGET_GB)


REDUCTION_MODEL, REDUCTION_GPU, REDUCTION_SEQ, REDUCTION_BATCH = "llama2-7b", "A100-80GB", 4096, 1


def reduction_check(panel: Panel) -> tuple[bool, str]:
    """Task 05: Llama-2 7B, s = 4,096, micro-batch 1 on an A100-80GB, fitting with the least extra compute."""
    wants = {"model is llama2-7b": panel.model.value == REDUCTION_MODEL,
             "GPU is the A100-80GB": panel.gpu.value == REDUCTION_GPU,
             "sequence is 4096": panel.seq.value == REDUCTION_SEQ,
             "micro-batch is 1": panel.micro_batch.value == REDUCTION_BATCH}
    missing = [k for k, ok in wants.items() if not ok]
    if missing:
        return False, "the task asks for: " + ", ".join(missing)
    chosen, best = panel.design, panel.best
    if chosen is None or best is None:
        return False, "the panel has no valid design: fix the input it names"
    if not chosen.fits:
        return False, f"does not fit: {chosen.reason}"
    if chosen.extra_compute > best.extra_compute + 1e-12:
        return False, (f"fits, but recompute adds {100 * chosen.extra_compute:.1f}% compute; another combination "
                       f"fits with less (predicted)")
    return True, (f"fits in {chosen.total_bytes / 1e9:.1f} GB with +{100 * chosen.extra_compute:.1f}% compute "
                  f"(predicted)")


def reduction_panel() -> Panel:
    from labkit.reduction.panel import ReductionPanel

    return ReductionPanel(model=REDUCTION_MODEL, gpu=REDUCTION_GPU, seq=REDUCTION_SEQ, micro_batch=REDUCTION_BATCH)


RESILIENCE_STEP = 1024  # GPUs: how close to the 90% threshold the answer must be


def _cr_goodput(panel: Panel, gpus: int) -> float:
    return panel.evaluate("checkpoint-restart", gpus, panel._rc_factors()).goodput


def resilience_check(panel: Panel) -> tuple[bool, str]:
    """Task 06: the cluster size, to within 1,024 GPUs, at which checkpoint-restart drops below 90% goodput."""
    from labkit.resilience.cluster import checkpoint_bytes

    wants = {"strategy is checkpoint-restart": panel.strategy.value == "checkpoint-restart",
             "failure trace is Llama 3": panel.preset.value == "Llama 3"
             and panel.rate.value == panel.traces["Llama 3"].rate_per_gpu_day,
             "storage of 100 GB/s": panel.storage_gbps.value == 100.0,
             "a 70B model's checkpoint (the panel's default)":
                 panel.checkpoint_gb.value == checkpoint_bytes(70_000_000_000) / 1e9,
             "restart of 600 s": panel.restart_s.value == 600.0}
    missing = [k for k, ok in wants.items() if not ok]
    if missing:
        return False, "the task asks for: " + ", ".join(missing)
    if panel.outcome is None:
        return False, "the panel has no valid outcome: fix the input it names"
    gpus = panel.gpus.value
    here = panel.outcome.goodput
    if here >= 0.9:
        return False, f"goodput is still {100 * here:.1f}% on {gpus:,} GPUs: more GPUs"
    fewer = gpus - RESILIENCE_STEP
    if fewer > 0 and _cr_goodput(panel, fewer) < 0.9:
        return False, (f"goodput is already below 90% on {fewer:,} GPUs ({100 * _cr_goodput(panel, fewer):.1f}%): "
                       f"fewer GPUs, to within {RESILIENCE_STEP:,} of where it drops")
    return True, (f"{100 * here:.1f}% on {gpus:,} GPUs, {100 * _cr_goodput(panel, fewer):.1f}% on {fewer:,} "
                  f"(predicted)")


def resilience_panel() -> Panel:
    from labkit.resilience.panel import ResiliencePanel

    return ResiliencePanel()
