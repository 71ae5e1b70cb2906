"""The checked design task of notebook 04 (offload timeline panel).

The task asks for an iteration that fits a tight device budget AND stays within a given
multiple of compute alone, over a host link of bounded speed. On the V100's own PCIe 3
link no policy comes near (the activations of GPT-2 large take several times longer to
move than to compute); at four times that link vDNN's swap-everything rule still misses
while SwapAdvisor's searched plan (Huang et al., ASPLOS 2020) makes it: the learner finds
that the link sets the cost, and that choosing what to swap is worth a search.
"""

from __future__ import annotations

from labkit.widgets import Panel

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
