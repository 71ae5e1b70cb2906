"""The design panel of notebook 02: a pipeline and ZeRO layout of a real model on a real cluster.

Schedule, p, m, v, data-parallel degree, ZeRO stage, tensor-parallel degree, GPU
and the link between stages; it draws the simulated schedule (``labkit.sim``)
and the memory per GPU (``labkit.predict.estimate``), and says the bubble (simulated
beside the formula), the step time and whether the layout fits.
"""

from __future__ import annotations

import ipywidgets as w
from matplotlib.figure import Figure

from labkit import hardware
from labkit.errors import LabkitError, require_positive
from labkit.inter_layer.scale import PipelinePlan, plan
from labkit.predict.estimate import SCHEDULES, ZERO_STAGES, TrainingSetup
from labkit.shapes import model_names, model_shape
from labkit.teach import plots
from labkit.teach.widgets import Panel, fit_html

DP_LINK = "ib-hdr"  # data-parallel groups span nodes: their ZeRO traffic crosses the cluster network
MAX_SIMULATED_ACTIONS = 20_000  # p * m * v * 2 boxes: beyond this the panel asks for fewer micro-batches


class PipelinePanel(Panel):
    """Find a pipeline layout with a small bubble that fits in memory."""

    def __init__(self, model: str = "gpt3-175b", gpu: str = "A100-80GB", schedule: str = "1f1b", pp: int = 16,
                 microbatches: int = 32, chunks: int = 1, dp: int = 8, zero_stage: int = 1, tp: int = 8,
                 link: str = "ib-hdr", micro_batch: int = 1, seq: int = 2048) -> None:
        st, cat = self.STYLE, hardware.load_catalogue()
        self.model = w.Dropdown(options=model_names(), value=model_shape(model).name, description="model", style=st)
        self.gpu = w.Dropdown(options=cat.gpu_names(), value=cat.gpu(gpu).name, description="GPU", style=st)
        self.link = w.Dropdown(options=cat.link_names(), value=cat.link(link).name, description="stage link",
                               style=st)
        self.schedule = w.Dropdown(options=list(SCHEDULES), value=schedule, description="schedule", style=st)
        self.pp = w.IntText(value=pp, description="pipeline p", style=st)
        self.microbatches = w.IntText(value=microbatches, description="micro-batches m", style=st)
        self.chunks = w.IntText(value=chunks, description="chunks v", style=st)
        self.tp = w.IntText(value=tp, description="tensor par.", style=st)
        self.dp = w.IntText(value=dp, description="data par.", style=st)
        self.zero_stage = w.Dropdown(options=list(ZERO_STAGES), value=zero_stage, description="ZeRO stage", style=st)
        self.micro_batch, self.seq = micro_batch, seq
        self.plan: PipelinePlan | None = None
        self._wire([self.model, self.gpu, self.link, self.schedule, self.pp, self.microbatches, self.chunks,
                    self.tp, self.dp, self.zero_stage], columns=2)

    def setup(self) -> TrainingSetup:
        interleaved = self.schedule.value == "interleaved"
        if not interleaved and self.chunks.value != 1:
            raise LabkitError(f"chunks must be 1 for the {self.schedule.value} schedule (got {self.chunks.value}); "
                              "v > 1 needs schedule interleaved")
        # the setup reads m = 0 as "p micro-batches": from the panel, 0 is a slip, refused, never replaced
        require_positive("micro-batches m", self.microbatches.value)
        return TrainingSetup(
            model_shape(self.model.value), micro_batch=self.micro_batch, seq=self.seq, tp=self.tp.value,
            pp=self.pp.value, dp=self.dp.value, zero_stage=self.zero_stage.value, schedule=self.schedule.value,
            microbatches=self.microbatches.value, chunks=self.chunks.value,
        )  # fmt: skip

    def compute(self) -> tuple[str, list[Figure]]:
        self.plan = None
        setup = self.setup()
        if setup.pp * setup.n_microbatches * setup.chunks * 2 > MAX_SIMULATED_ACTIONS:
            raise LabkitError(f"microbatches times pp times chunks must be at most {MAX_SIMULATED_ACTIONS // 2:,} "
                              f"for the simulator here (got {setup.pp * setup.n_microbatches * setup.chunks:,})")
        if setup.shape.layers % (setup.pp * setup.chunks):
            raise LabkitError(f"pp * chunks must divide layers={setup.shape.layers} (got {setup.pp * setup.chunks})")
        gpu = hardware.gpu(self.gpu.value)
        p = plan(setup, gpu, hardware.link(self.link.value), hardware.link(DP_LINK))
        self.plan = p
        gpus = setup.dp * setup.tp * setup.pp
        fits = (f"{p.memory_per_gpu / 2**30:.1f} GiB (2^30 B) per GPU: " + ("fits" if p.fits else "does not fit")
                + f" on {gpu.name} ({gpu.memory_bytes / 2**30:.0f} GiB, its true capacity)")
        text = (f"{fit_html(p.fits, fits)}; {gpus:,} GPUs; bubble {100 * p.bubble_simulated:.1f}% simulated, "
                f"{100 * p.bubble_formula:.1f}% by (p-1)/(v*m+p-1); step {p.step_seconds:.2f} s "
                f"(pipeline {p.timeline.makespan:.2f} s + ZeRO traffic over {DP_LINK} {p.zero_seconds:.2f} s), "
                "predicted")
        ranks = [s for s in p.timeline.streams if s.startswith("rank")]
        chart = plots.gantt(p.timeline, title=f"{setup.schedule}, p={setup.pp}, m={setup.n_microbatches}"
                            + (f", v={setup.chunks}" if setup.chunks > 1 else "") + " (simulated)", streams=ranks)
        bars = plots.memory_bars({"per GPU": p.per_device_bytes}, capacity_bytes=gpu.memory_bytes,
                                 capacity_label=gpu.name, unit=2**30, unit_name="GiB (2^30 bytes)")  # one unit
        return text, [chart, bars]
