"""Design tasks for the notebooks' panels: a goal and a check of the panel's current setting.

Each task is a :class:`labkit.teach.widgets.DesignTask` made for one panel (``task(key)``). The check names
what is still missing, never just "no". The proof that each task is solvable (a search over a small grid of
settings) is instructors' material and lives in :mod:`labkit.course.design_key`, outside the student release.
"""

from __future__ import annotations

from collections.abc import Callable

from labkit.errors import require_choice
from labkit.practice import design_parallel, design_storage, design_topics
from labkit.teach.widgets import DesignTask, Panel


def _memory_check(panel: Panel) -> tuple[bool, str]:
    est = panel.estimate
    if est is None:
        return False, "the panel has no valid estimate: fix the input it names"
    wants = {"model is llama2-7b": panel.model.value == "llama2-7b", "sequence is 2048": panel.seq.value == 2048,
             "GPU is the RTX-4090": panel.gpu.value == "RTX-4090", "at most 8 GPUs": panel.dp.value <= 8}
    missing = [k for k, ok in wants.items() if not ok]
    if missing:
        return False, "the task asks for: " + ", ".join(missing)
    spare = est.headroom_bytes / 1e9  # GB, the panel's one unit
    if spare < 2:
        return False, f"{spare:.1f} GB to spare; the task asks for at least 2 GB (room for the allocator's reserve)"
    return True, f"{spare:.1f} GB to spare per GPU with {panel.dp.value} GPU(s)"


def _memory_panel() -> Panel:
    from labkit.teach.widgets import MemoryPanel

    return MemoryPanel(model="llama2-7b", gpu="RTX-4090", seq=2048)


TASKS: dict[str, tuple[str, Callable[[Panel], tuple[bool, str]], Callable[[], Panel]]] = {
    "01": ("Train Llama-2 7B at sequence 2048 on RTX 4090s: find a setting that fits with at least 2 GB (1e9 bytes) "
           "to spare on each card, using at most 8 cards.", _memory_check, _memory_panel),
    "02": ("GPT-3 175B on at most 1,024 A100-80GB GPUs, stages linked by ib-hdr, with a global batch of at most "
           "1,536 sequences (m x data parallel, micro-batch 1: Megatron-LM's GPT-3 example): get the simulated "
           "bubble under 10% of the step while the layout still fits in memory.", design_parallel.pipeline_check,
           design_parallel.pipeline_panel),
    "03": ("One GPT-3 175B MLP block (h = 12288, 2048 tokens, 16-bit) on A100 servers (nvlink3 inside a server of 8, "
           "ib-hdr between): hold it in at most 375 MB per GPU with under 6 ms of communication (forward and "
           "backward).", design_parallel.tensor_check, design_parallel.tensor_panel),
    "04": ("GPT-2 large (s = 1024, micro-batch 4) on a V100-32GB held to a 16 GB budget: make the iteration fit "
           "and take at most 2.5x as long as compute alone, over a host link of at most 64 GB/s (4x the V100's "
           "PCIe 3).", design_storage.offload_check, design_storage.offload_panel),
    "05": ("Llama-2 7B at s = 4096, micro-batch 1, on an A100-80GB: combine recompute, precision and optimizer-state "
           "bits until it fits, with the least extra compute.", design_storage.reduction_check,
           design_storage.reduction_panel),
    "06": ("Checkpoint-restart to 100 GB/s storage at the Llama 3 run's failure rate (a 70B model's checkpoint, "
           "600 s restart): find the cluster size, to within 1,024 GPUs, at which goodput drops below 90%.",
           design_storage.resilience_check, design_storage.resilience_panel),
    "07": (design_topics.economics_goal(), design_topics.economics_check,
           design_topics.economics_panel),
    "08": ("Keep the trained layer's output error under 1% at 2% read noise, at the least energy per product.",
           design_topics.crossbar_check, design_topics.crossbar_panel),
    "09": ("Pretrain Llama-2 70B on 2 trillion tokens (s = 4096, a global batch of 1,024 sequences: Llama 2's own) "
           "on H100-SXM GPUs in under 30 days: find the fewest GPUs, a power of two, on which the advisor's fastest "
           "plan does it.", design_topics.advisor_check, design_topics.advisor_panel),
}

def task(key: str) -> DesignTask:
    """The design task of notebook ``key`` ("01", ...), ready for ``panel.set_task``."""
    require_choice("design task", key, TASKS)
    goal, check, _ = TASKS[key]
    return DesignTask(goal, check, f"{key}.design")
