"""ipywidgets panels the notebooks share; each can be driven without a browser.

A panel keeps its logic in ``update()``, which the widgets call on every change
and tests call directly: it computes with ``labkit.estimate``, writes a one-line
verdict (or the error message of bad input) into ``message``, and draws the figure
into ``output``. Bad input never raises out of a callback: the panel shows the
message that names the field and the allowed values.
"""

from __future__ import annotations

import html

import ipywidgets as w
from IPython.display import display
from matplotlib.figure import Figure

from labkit import hardware, plots
from labkit.errors import LabkitError
from labkit.estimate import PRECISIONS, RECOMPUTE, ZERO_STAGES, MemoryEstimate, TrainingSetup, estimate_memory
from labkit.shapes import model_names, model_shape


def verdict(est: MemoryEstimate) -> str:
    """'fits, 12.3 GB to spare' or 'does not fit: short by 40.1 GB' (GB = 1e9 bytes)."""
    total = est.per_device_bytes["total"] / 1e9
    cap = f"{est.gpu} ({est.device_bytes / 1e9:.1f} GB)"
    if est.fits:
        return f"{total:.1f} GB per GPU: fits on {cap}, {est.headroom_bytes / 1e9:.1f} GB to spare"
    return f"{total:.1f} GB per GPU: does not fit on {cap}, short by {-est.headroom_bytes / 1e9:.1f} GB"


class MemoryPanel:
    """Model preset, micro-batch, sequence, precision, recompute, ZeRO stage, DP degree, GPU."""

    def __init__(self, model: str = "llama2-7b", gpu: str = "RTX-4090", micro_batch: int = 1,
                 seq: int = 2048, precision: str = "bf16-mixed", recompute: str = "none",
                 zero_stage: int = 0, dp: int = 1) -> None:
        style = {"description_width": "110px"}
        self.model = w.Dropdown(options=model_names(), value=model_shape(model).name,
                                description="model", style=style)
        self.gpu = w.Dropdown(options=hardware.load_catalogue().gpu_names(),
                              value=hardware.gpu(gpu).name, description="GPU", style=style)
        self.micro_batch = w.IntText(value=micro_batch, description="micro-batch", style=style)
        self.seq = w.IntText(value=seq, description="sequence", style=style)
        self.precision = w.Dropdown(options=list(PRECISIONS), value=precision, description="precision",
                                    style=style)
        self.recompute = w.Dropdown(options=list(RECOMPUTE), value=recompute, description="recompute",
                                    style=style)
        self.zero_stage = w.Dropdown(options=list(ZERO_STAGES), value=zero_stage, description="ZeRO stage",
                                     style=style)
        self.dp = w.IntText(value=dp, description="data parallel", style=style)
        self.message = w.HTML()
        self.output = w.Output()
        self.figure: Figure | None = None
        self.estimate: MemoryEstimate | None = None
        controls = [self.model, self.gpu, self.micro_batch, self.seq, self.precision, self.recompute,
                    self.zero_stage, self.dp]
        for c in controls:
            c.observe(lambda _change: self.update(), names="value")
        self.ui = w.VBox([w.HBox([w.VBox(controls[:4]), w.VBox(controls[4:])]), self.message, self.output])
        self.update()

    def setup(self) -> TrainingSetup:
        return TrainingSetup(
            model_shape(self.model.value), micro_batch=self.micro_batch.value, seq=self.seq.value,
            precision=self.precision.value, recompute=self.recompute.value,
            zero_stage=self.zero_stage.value, dp=self.dp.value,
        )

    def update(self) -> MemoryEstimate | None:
        """Recompute, redraw, and say whether it fits; show the error of bad input instead."""
        try:
            device = hardware.gpu(self.gpu.value)
            est = estimate_memory(self.setup(), device.memory_bytes, device.name)
        except LabkitError as err:
            self.estimate, self.figure = None, None
            self.message.value = f"<b style='color:#b00'>bad input:</b> {html.escape(str(err))}"
            self.output.clear_output()
            return None
        self.estimate = est
        color = "#070" if est.fits else "#b00"
        share = f"activations are {100 * est.activation_share:.0f}% of it"
        self.message.value = f"<b style='color:{color}'>{html.escape(verdict(est))}</b>; {share}"
        self.figure = plots.memory_bars({est.setup["shape"]["name"]: est.per_device_bytes},
                                        capacity_bytes=device.memory_bytes, capacity_label=device.name)
        self.output.clear_output(wait=True)
        with self.output:
            display(self.figure)
        return est

    def _ipython_display_(self) -> None:
        display(self.ui)
