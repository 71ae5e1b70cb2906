"""The offload timeline panel of notebook 04: one simulated iteration, its four streams and its stalls.

Model preset, GPU, sequence, micro-batch, host link and disk bandwidth, device
memory budget and swap policy; it replays one iteration in
``labkit.offload.iteration`` and draws the compute, d2h, h2d and disk streams,
with the compute stream's idle gaps (stalls: compute waiting for a transfer)
shaded red on top of ``plots.gantt``. Resident bytes are the model states (16
bytes per parameter, bf16 mixed precision with Adam) plus the activations outside
the transformer layers, as in ``labkit.offload.flashneuron``. The bandwidth fields
override the catalogue's PCIe link of the GPU and both directions of the SSD.
"""

from __future__ import annotations

from dataclasses import replace

import ipywidgets as w
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from labkit import hardware
from labkit.errors import LabkitError, require_choice, require_positive
from labkit.offload import swapadvisor
from labkit.offload.iteration import STREAMS, Machine, Plan, Result, compute_time, simulate_iteration, transformer_ops
from labkit.predict.estimate import activation_bytes_outside_layers, model_state_bytes
from labkit.shapes import model_names, model_shape
from labkit.teach import plots
from labkit.teach.widgets import Panel, fit_html

# "swapadvisor" searches 12 x 20 plans (seed 0); about 0.3 s for the default model, so the panel keeps it
POLICIES = ("none", "vdnn-all", "vdnn-to-disk", "swapadvisor")
DISK = "NVMe-PCIe4"


class OffloadPanel(Panel):
    """Watch activations leave and come back, and where compute waits for them."""

    def __init__(self, model: str = "gpt2-large", gpu: str = "V100-32GB", seq: int = 1024, micro_batch: int = 4,
                 link_gbps: float | None = None, disk_gbps: float | None = None, budget_gb: float = 16.0,
                 policy: str = "vdnn-all") -> None:
        st, cat = self.STYLE, hardware.load_catalogue()
        dev = cat.gpu(gpu)
        link_gbps = cat.link(dev.pcie).bandwidth / 1e9 if link_gbps is None else link_gbps
        disk_gbps = cat.tier(DISK).read_bandwidth / 1e9 if disk_gbps is None else disk_gbps
        self.model = w.Dropdown(options=model_names(), value=model_shape(model).name, description="model", style=st)
        self.gpu = w.Dropdown(options=cat.gpu_names(), value=dev.name, description="GPU", style=st)
        self.seq = w.IntText(value=seq, description="sequence", style=st)
        self.micro_batch = w.IntText(value=micro_batch, description="micro-batch", style=st)
        self.link_gbps = w.FloatText(value=link_gbps, description="host link GB/s", style=st)
        self.disk_gbps = w.FloatText(value=disk_gbps, description="disk GB/s", style=st)
        self.budget_gb = w.FloatText(value=budget_gb, description="budget GB", style=st)
        self.policy = w.Dropdown(options=list(POLICIES), value=require_choice("policy", policy, POLICIES),
                                 description="policy", style=st)
        self.result: Result | None = None
        self._wire([self.model, self.gpu, self.seq, self.micro_batch, self.link_gbps, self.disk_gbps,
                    self.budget_gb, self.policy], columns=2)

    def machine(self) -> Machine:
        """The GPU at the budget, its PCIe link and the SSD at the bandwidths in the fields."""
        dev, shape = hardware.gpu(self.gpu.value), model_shape(self.model.value)
        bw = require_positive("host link GB/s", self.link_gbps.value, integer=False) * 1e9
        disk_bw = require_positive("disk GB/s", self.disk_gbps.value, integer=False) * 1e9
        budget = require_positive("budget GB", self.budget_gb.value, integer=False) * 1e9
        if budget > dev.memory_bytes:
            raise LabkitError(f"budget GB must be at most the memory of the {dev.name}, "
                              f"{dev.memory_bytes / 1e9:.1f} GB ({dev.memory_bytes / 2**30:.0f} GiB) "
                              f"(got {self.budget_gb.value})")
        seq = require_positive("sequence", self.seq.value)
        batch = require_positive("micro-batch", self.micro_batch.value)
        resident = sum(model_state_bytes(shape.params, "bf16-mixed").values())
        resident += activation_bytes_outside_layers(shape, seq, batch)
        disk = replace(hardware.tier(DISK), read_bandwidth=disk_bw, write_bandwidth=disk_bw)
        return Machine(budget, resident, replace(hardware.link(dev.pcie), bandwidth=bw), disk)

    def compute(self) -> tuple[str, list[Figure]]:
        self.result = None
        m, policy = self.machine(), require_choice("policy", self.policy.value, POLICIES)
        shape, dev = model_shape(self.model.value), hardware.gpu(self.gpu.value)
        ops = transformer_ops(shape, self.seq.value, self.micro_batch.value, dev.peak_flops["bf16"])
        if policy == "swapadvisor":
            res = swapadvisor.search(ops, m).best.result
        else:
            plan = {"none": Plan.none(len(ops)),
                    "vdnn-all": swapadvisor.vdnn_plan(ops),
                    "vdnn-to-disk": swapadvisor.vdnn_plan(ops, target="disk")}[policy]
            res = simulate_iteration(ops, m, plan)
        self.result = res
        busy = compute_time(ops)
        over = res.peak_bytes - m.capacity_bytes
        fit = fit_html(over <= 0, f"peak {res.peak_bytes / 1e9:.1f} GB of a {m.capacity_bytes / 1e9:.1f} GB budget: "
                       + ("fits" if over <= 0 else f"out of memory by {over / 1e9:.1f} GB"))
        to_disk = res.bytes_moved if policy == "vdnn-to-disk" else 0.0
        text = (f"{fit}; iteration {res.time_s * 1e3:.1f} ms = compute {busy * 1e3:.1f} ms + stalls "
                f"{(res.time_s - busy) * 1e3:.1f} ms; {res.bytes_moved / 1e9:.1f} GB over the host link, "
                f"{to_disk / 1e9:.1f} GB to and from disk (predicted)")
        return text, [self.chart(res, f"{shape.name}, {policy}, {dev.name} (simulated)")]

    @staticmethod
    def chart(res: Result, title: str) -> Figure:
        """``plots.gantt`` of the four streams, with the compute lane's idle gaps shaded red."""
        unit, scale = ("s", 1.0) if res.time_s >= 1 else ("ms", 1e3)
        fig = plots.gantt(res.timeline, title="", time_unit=unit, streams=list(STREAMS))
        ax = fig.axes[0]
        busy = sorted((e.start, e.end) for e in res.timeline.events if e.stream == "compute")
        pairs = zip(busy, busy[1:], strict=False)
        gaps = [(a * scale, (b - a) * scale) for (_, a), (b, _) in pairs if b - a > 1e-9 * res.time_s]
        ax.broken_barh(gaps, (-0.4, 0.8), facecolors="#d62728", alpha=0.35, linewidth=0)
        ax.set_title(title, loc="left", fontsize=10)
        handles = [Patch(color=c, label=k) for k, c in (("forward", "#4C72B0"), ("backward", "#DD8452"),
                                                         ("transfer", "#8C8C8C"), ("stall", "#F2A9A9"))]
        ax.legend(handles=handles, loc="lower right", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False, ncols=4)
        return fig
