"""The design panel of notebook 05: recompute, precision and optimizer-state bits for a real model on a GPU.

Model preset, GPU, micro-batch, sequence, recompute mode (none, selective, sqrt, full), precision and
Adam-state width (32 or block-wise 8 bits); ``labkit.reduction.design`` predicts the bytes. The
figure draws one bar per recompute mode at the chosen precision and state width (the chosen one
marked), each labelled with the compute it adds, against the GPU's memory; the message gives the
verdict and the reason when it does not fit. The cheapest combination of the whole grid that fits
(``best``) is kept for the design task's check, never shown: it is the task's answer.
"""

from __future__ import annotations

import ipywidgets as w
from matplotlib.figure import Figure

from labkit import hardware
from labkit.errors import require_choice
from labkit.reduction import design
from labkit.shapes import model_names, model_shape
from labkit.teach import plots
from labkit.teach.widgets import Panel, fit_html


class ReductionPanel(Panel):
    """Trade compute (recompute) or precision (mixed, 8-bit states) for memory until it fits."""

    def __init__(self, model: str = "gpt2-xl", gpu: str = "RTX-4090", micro_batch: int = 1, seq: int = 1024,
                 recompute: str = "none", precision: str = "bf16-mixed", optimizer_bits: int = 32) -> None:
        st, cat = self.STYLE, hardware.load_catalogue()
        self.model = w.Dropdown(options=model_names(), value=model_shape(model).name, description="model", style=st)
        self.gpu = w.Dropdown(options=cat.gpu_names(), value=cat.gpu(gpu).name, description="GPU", style=st)
        self.micro_batch = w.IntText(value=micro_batch, description="micro-batch", style=st)
        self.seq = w.IntText(value=seq, description="sequence", style=st)
        self.recompute = w.Dropdown(options=list(design.RECOMPUTE_MODES), description="recompute", style=st,
                                    value=require_choice("recompute", recompute, design.RECOMPUTE_MODES))
        self.precision = w.Dropdown(options=list(design.PRECISION_NAMES), description="precision", style=st,
                                    value=require_choice("precision", precision, design.PRECISION_NAMES))
        self.optimizer_bits = w.Dropdown(options=list(design.OPTIMIZER_BITS), description="Adam state bits",
                                         style=st, value=require_choice("optimizer_bits", optimizer_bits,
                                                                               design.OPTIMIZER_BITS))
        self.design: design.Design | None = None
        self.best: design.Design | None = None
        self._wire([self.model, self.gpu, self.micro_batch, self.seq, self.recompute, self.precision,
                    self.optimizer_bits], columns=2)

    def compute(self) -> tuple[str, list[Figure]]:
        self.design = self.best = None
        args = (self.model.value, self.gpu.value, self.micro_batch.value, self.seq.value)
        modes = {r: design.evaluate(*args, r, self.precision.value, self.optimizer_bits.value)
                 for r in design.RECOMPUTE_MODES}
        chosen = modes[self.recompute.value]
        self.design, self.best = chosen, design.cheapest_fit(*args)
        gb = chosen.total_bytes / 1e9
        if chosen.fits:
            head = f"{gb:.1f} GB per GPU: fits on the {chosen.gpu} ({chosen.capacity_bytes / 1e9:.1f} GB)"
        else:
            head = f"does not fit: {chosen.reason}"
        text = f"{fit_html(chosen.fits, head)}; recompute adds {100 * chosen.extra_compute:.1f}% compute (predicted)"
        if self.best is None:  # no setting can meet a fit: say so; the cheapest fit itself is the task's answer
            text += "<br>no combination of recompute, precision and state bits fits this GPU"
        bars = {("> " if r == chosen.recompute else "") + f"{r}\n+{100 * d.extra_compute:.1f}%": d.by_category
                for r, d in modes.items()}
        title = f"{chosen.model}, {chosen.precision}, {chosen.optimizer_bits}-bit states (predicted)"
        fig = plots.memory_bars(bars, capacity_bytes=chosen.capacity_bytes, capacity_label=chosen.gpu, title=title)
        return text, [fig]
