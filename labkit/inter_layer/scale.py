"""Inter-layer parallelism at scale: a real model on a real cluster, through the hardware model.

The micro-runs of notebook 02 check the formulas; this module applies them to a
catalogue GPU and link. A pipeline stage's time per micro-batch is its share of
the forward FLOPs (Narayanan et al., SC 2021) at a fraction of the GPU's peak
(``efficiency``: Megatron-LM reached about half of the A100's peak on GPT-3-class
models, same paper), backward twice that; the activations a stage sends on are
b*s*h 16-bit elements over the link between stages (alpha-beta model). ZeRO's
traffic per step is 2 Psi (3 Psi at stage 3) elements (Rajbhandari et al.,
SC 2020), timed as a ring over the data-parallel link: each GPU sends (N-1)/N
of that volume.
"""

from __future__ import annotations

from dataclasses import dataclass

from labkit.errors import require_choice, require_positive
from labkit.hardware import Device, Link, transfer_time
from labkit.predict.estimate import TrainingSetup, estimate_memory, forward_flops, zero_communication_elements
from labkit.sim import Timeline, bubble_fraction, measured_bubble, simulate_pipeline

DEFAULT_EFFICIENCY = 0.5


@dataclass(frozen=True)
class StageTimes:
    """Seconds per micro-batch on one pipeline stage (one GPU of a tensor-parallel group)."""

    t_fwd: float
    t_bwd: float
    t_comm: float
    activation_bytes_sent: float


def stage_times(setup: TrainingSetup, gpu: Device, link: Link | None, efficiency: float = DEFAULT_EFFICIENCY,
                dtype: str = "bf16") -> StageTimes:
    """Forward, backward and send time of one stage for one micro-batch (predicted)."""
    require_positive("efficiency", efficiency, integer=False)
    shape, s, b = setup.shape, setup.seq_len, setup.micro_batch
    require_choice("dtype", dtype, list(gpu.peak_flops))
    flops = forward_flops(shape, s, b) / (setup.pp * setup.tp)  # per rank; labkit.sim splits it over chunks
    t_fwd = flops / (gpu.peak_flops[dtype] * min(efficiency, 1.0))
    sent = 2.0 * b * s * shape.hidden / (setup.tp if setup.sp else 1)
    t_comm = transfer_time(sent, link) if link is not None and setup.pp > 1 else 0.0
    return StageTimes(t_fwd, 2 * t_fwd, t_comm, sent)


@dataclass(frozen=True)
class PipelinePlan:
    """One layout on one cluster: its simulated schedule, bubble, step time and memory per GPU."""

    setup: TrainingSetup
    times: StageTimes
    timeline: Timeline
    bubble_simulated: float
    bubble_formula: float
    zero_seconds: float
    per_device_bytes: dict[str, float]
    fits: bool

    @property
    def memory_per_gpu(self) -> float:
        return self.per_device_bytes["total"]

    @property
    def step_seconds(self) -> float:
        return self.timeline.makespan + self.zero_seconds


def zero_step_seconds(params_per_gpu: float, dp: int, zero_stage: int, link: Link, elem_bytes: int = 2) -> float:
    """Seconds per step of ZeRO's gradient/parameter traffic over a ring of ``dp`` GPUs (not overlapped)."""
    if dp == 1:
        return 0.0
    volume = zero_communication_elements(max(1, round(params_per_gpu)), zero_stage) * elem_bytes
    return transfer_time(volume * (dp - 1) / dp, link)


def plan(setup: TrainingSetup, gpu: Device, stage_link: Link | None, dp_link: Link,
         efficiency: float = DEFAULT_EFFICIENCY) -> PipelinePlan:
    """Simulate one training step of ``setup`` on ``gpu``: pipeline schedule, ZeRO traffic, memory."""
    times = stage_times(setup, gpu, stage_link, efficiency)
    kind, p, m, v = setup.schedule, setup.pp, setup.n_microbatches, setup.chunks
    timeline = simulate_pipeline(kind, p, m, times.t_fwd, times.t_bwd, times.t_comm, v=v)
    est = estimate_memory(setup, gpu.memory_bytes, gpu.name)
    params_per_gpu = setup.shape.params / (setup.tp * setup.pp)
    return PipelinePlan(
        setup=setup, times=times, timeline=timeline, bubble_simulated=measured_bubble(timeline),
        bubble_formula=bubble_fraction(p, m, v if kind == "interleaved" else 1),
        zero_seconds=zero_step_seconds(params_per_gpu, setup.dp, setup.zero_stage, dp_link),
        per_device_bytes=est.per_device_bytes, fits=bool(est.fits),
    )  # fmt: skip
