"""Inter-layer parallelism at scale: a real model on a real cluster, through the hardware model.

The micro-runs of notebook 02 check the formulas; this module applies them to a
catalogue GPU and link. A pipeline stage's time per micro-batch is its layers' kernels
(``labkit.predict.compute.stage_seconds``, the roofline the advisor prices with: each GEMM,
attention and element-wise kernel at the rate real kernels reach), the slowest (last) stage's
output layer included, backward and any recompute after it. The bubble is not in those
kernel times: the simulator adds it from the schedule, so it is counted once (Megatron-LM's
"half of the A100's peak", Narayanan et al., SC 2021, already contains it). The activations a
stage sends on are b*s*h 16-bit elements over the link between stages (alpha-beta model).
ZeRO's traffic per step is 2 Psi (3 Psi at stage 3) elements (Rajbhandari et al., SC 2020): a
ring all-reduce of the gradients, or at stage 3 two all-gathers of the parameters and a
reduce-scatter of the gradients, priced by ``labkit.predict.collectives``, not overlapped.
"""

from __future__ import annotations

from dataclasses import dataclass

from labkit.errors import require_choice
from labkit.hardware import Device, Link, transfer_time
from labkit.predict import collectives as coll
from labkit.predict import compute
from labkit.predict.estimate import TrainingSetup, estimate_memory
from labkit.sim import Timeline, bubble_fraction, measured_bubble, simulate_pipeline


@dataclass(frozen=True)
class StageTimes:
    """Seconds per micro-batch on one pipeline stage (one GPU of a tensor-parallel group)."""

    t_fwd: float
    t_bwd: float
    t_comm: float
    activation_bytes_sent: float


def stage_times(setup: TrainingSetup, gpu: Device, link: Link | None, dtype: str = "bf16") -> StageTimes:
    """Forward, backward (with any recompute) and send time of one stage for one micro-batch (predicted)."""
    shape, s, b = setup.shape, setup.seq_len, setup.micro_batch
    require_choice("dtype", dtype, list(gpu.peak_flops))
    k = compute.stage_seconds(shape, s, b, setup.tp, setup.pp, gpu, dtype, setup.sp and setup.tp > 1,
                              setup.attention == "fused", setup.recompute)  # labkit.sim splits it over chunks
    sent = 2.0 * b * s * shape.hidden / (setup.tp if setup.sp else 1)
    t_comm = transfer_time(sent, link) if link is not None and setup.pp > 1 else 0.0
    return StageTimes(k["forward"], k["backward"] + k["recompute"], t_comm, sent)


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


def zero_step_seconds(params_per_gpu: float, dp: int, zero_stage: int, link: Link, elem_bytes: int = 2,
                      form: str = coll.DEFAULT_FORM) -> float:
    """Seconds per step of ZeRO's gradient/parameter traffic over a ring of ``dp`` GPUs (not overlapped):
    an all-reduce of the gradients (2 Psi), or at stage 3 two all-gathers and a reduce-scatter (3 Psi)."""
    require_choice("zero_stage", zero_stage, (0, 1, 2, 3))
    nbytes = params_per_gpu * elem_bytes
    if zero_stage == 3:
        return 2 * coll.all_gather(nbytes, dp, link, form) + coll.reduce_scatter(nbytes, dp, link, form)
    return coll.all_reduce(nbytes, dp, link, form)


def plan(setup: TrainingSetup, gpu: Device, stage_link: Link | None, dp_link: Link) -> PipelinePlan:
    """Simulate one training step of ``setup`` on ``gpu``: pipeline schedule, ZeRO traffic, memory."""
    times = stage_times(setup, gpu, stage_link, "fp32" if setup.precision == "fp32" else "bf16")
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
