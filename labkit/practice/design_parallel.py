"""The checked design tasks of notebooks 02 (pipeline panel) and 03 (tensor-parallel panel).

Each check reads the panel's public state after its last redraw (``PipelinePanel.plan``,
``TensorParallelPanel.cost``) and names every condition still unmet, so "Not yet" always
says what to change. Both tasks need two results put together, not one control turned:

* 02: the bubble must fall under 10% of the step, but the global batch is capped at
  Megatron-LM's 1,536 sequences (its GPT-3 175B example script), so more micro-batches
  per pipeline means fewer data-parallel replicas, and interleaving, which needs fewer
  micro-batches for the same bubble (Narayanan et al., SC 2021), holds more activations.
  The bubble judged is the simulated one, which includes the sends between stages over
  InfiniBand HDR (the stages of a 16-stage pipeline sit on different servers).
* 03: one GPT-3 MLP block in at most 375 MB per GPU on A100 servers: 1D keeps the block's
  input whole on every rank, so it needs more than 8 GPUs, and more than 8 leave the NVLink
  domain; a mode that splits the input as well has to do it inside one server.
"""

from __future__ import annotations

from labkit.teach.widgets import Panel

GiB = 2**30
MAX_GPUS = 1024
MAX_BATCH = 1536  # sequences: Megatron-LM's examples/gpt3/train_gpt3_175b_distributed.sh, --global-batch-size
MAX_BUBBLE = 0.10
TP_MAX_MB = 375  # MB (1e6 B) per GPU for one MLP block, as the panel prints it
TP_MAX_MS = 6.0  # ms: 3D inside one server takes 5.3 ms at NCCL bus bandwidth; 1D over 16 GPUs 9.0 ms


def _fixed(wants: dict[str, bool]) -> list[str]:
    return [k for k, ok in wants.items() if not ok]


def pipeline_check(panel: Panel) -> tuple[bool, str]:
    """Task 02: GPT-3 175B on <= 1,024 A100-80GB over ib-hdr, batch <= 1,536 sequences, fits, simulated bubble < 10%."""
    p = panel.plan
    if p is None:
        return False, "the panel has no valid layout: fix the input it names"
    missing = _fixed({"model is gpt3-175b": panel.model.value == "gpt3-175b",
                      "GPU is the A100-80GB": panel.gpu.value == "A100-80GB",
                      "stage link is ib-hdr (stages sit on different servers)": panel.link.value == "ib-hdr"})
    if missing:
        return False, "the task asks for: " + ", ".join(missing)
    s = p.setup
    gpus, batch = s.dp * s.tp * s.pp, s.n_microbatches * s.dp * s.micro_batch
    memory, bubble = f"{p.memory_per_gpu / GiB:.1f} GiB per GPU", f"bubble {100 * p.bubble_simulated:.1f}% (simulated)"
    problems = []
    if gpus > MAX_GPUS:
        problems.append(f"{gpus:,} GPUs; the task allows at most {MAX_GPUS:,}")
    if batch > MAX_BATCH:
        problems.append(f"a global batch of {batch:,} sequences (m x data par. x micro-batch {s.micro_batch}); "
                        f"the task allows at most {MAX_BATCH:,}")
    if not p.fits:
        problems.append(f"{memory} does not fit the {panel.gpu.value}")
    if p.bubble_simulated >= MAX_BUBBLE:
        problems.append(f"{bubble}; the task asks for under {100 * MAX_BUBBLE:.0f}%")
    if problems:
        return False, "; ".join(problems)
    return True, f"{bubble}, {memory} (fits), {gpus:,} GPUs, a global batch of {batch:,} sequences"


def pipeline_panel() -> Panel:
    from labkit.inter_layer.panel import PipelinePanel

    return PipelinePanel(pp=16, microbatches=32, dp=8, zero_stage=1)


def tensor_check(panel: Panel) -> tuple[bool, str]:
    """Task 03: one GPT-3 MLP block on A100 servers in at most 375 MB per GPU, with communication under 6 ms."""
    from labkit import hardware
    from labkit.intra_layer import placement

    c = panel.cost
    if c is None:
        return False, "the panel has no valid layout: fix the input it names"
    missing = _fixed({"hidden h is 12288": panel.hidden.value == 12288,
                      "tokens b*s are 2048": panel.batch.value == 2048,
                      "link is nvlink3": panel.link.value == "nvlink3",
                      "between servers is ib-hdr": panel.inter.value == "ib-hdr"})
    if missing:
        return False, "the task asks for: " + ", ".join(missing)
    p = panel.devices.value
    mb = (c.weight_bytes + c.bias_bytes + c.activation_bytes) / 1e6
    where = placement.place(p, hardware.link("nvlink3"), hardware.gpu("A100-80GB"), hardware.link("ib-hdr"))
    ms = 1e3 * c.seconds(where.used)
    problems = []
    if mb > TP_MAX_MB:
        problems.append(f"{mb:,.1f} MB per GPU; the task asks for at most {TP_MAX_MB} MB")
    if ms >= TP_MAX_MS:
        problems.append(f"communication {ms:.2f} ms over {where.used.name}; the task asks for under {TP_MAX_MS:.0f} ms")
    if problems:
        return False, "; ".join(problems)
    return True, f"{mb:,.1f} MB per GPU, communication {ms:.2f} ms over {where.used.name}"


def tensor_panel() -> Panel:
    from labkit.intra_layer.panel import TensorParallelPanel

    return TensorParallelPanel(mode="2d", devices=16, hidden=12288, batch=2048, link="nvlink3")
