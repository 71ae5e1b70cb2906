"""The crossbar widget of notebook 08: ADC bits, weight bits, read noise and array size against error and energy.

To answer in well under a second it runs one layer, not the whole model: the layer and the
inputs it saw (the notebook passes the trained tiny GPT's MLP ``c_proj`` and its recorded
inputs; the default is a seeded layer of the same shape). Every change reprograms the layer
onto crossbars (``labkit.future.crossbar``), reports its relative output error beside the
digital layer's (zero), draws error against ADC bits at the other settings, and prices one
matrix-vector product with ``labkit.future.pim.mvm_energy``. Bad input (negative noise, an
array of no rows) shows the message naming the field, never a traceback.
"""

from __future__ import annotations

import ipywidgets as w
import matplotlib.pyplot as plt
import torch
import torch.nn as nn
from matplotlib.figure import Figure

from labkit.errors import LabkitError, require_positive
from labkit.future.crossbar import CrossbarConfig, relative_error
from labkit.future.pim import mvm_energy
from labkit.widgets import Panel

CURVE_BITS = tuple(range(2, 13))


def default_layer(n_in: int = 256, n_out: int = 64, tokens: int = 64, seed: int = 0) -> tuple[nn.Linear, torch.Tensor]:
    """A seeded linear layer (the tiny GPT's MLP c_proj shape at d_model 64) and inputs for it."""
    g = torch.Generator().manual_seed(seed)
    layer = nn.Linear(n_in, n_out)
    with torch.no_grad():
        layer.weight.copy_(torch.randn(n_out, n_in, generator=g) * 0.02)
        layer.bias.zero_()
    return layer, torch.randn(tokens, n_in, generator=g)


class CrossbarPanel(Panel):
    """Run one trained layer on analog crossbars and watch its error and its energy per product."""

    def __init__(self, layer: nn.Linear | None = None, inputs: torch.Tensor | None = None, adc_bits: int = 8,
                 weight_bits: int = 6, noise_percent: float = 1.0, array_size: int = 128, seed: int = 0) -> None:
        if (layer is None) != (inputs is None):
            raise LabkitError("layer and inputs must be given together (or neither, for the default layer)")
        self.layer, self.inputs = (layer, inputs) if layer is not None else default_layer()
        st = self.STYLE
        self.seed = seed
        self.adc_bits = w.IntSlider(value=adc_bits, min=2, max=12, description="ADC bits", style=st)
        self.weight_bits = w.IntSlider(value=weight_bits, min=1, max=8, description="weight bits", style=st)
        self.noise_percent = w.FloatText(value=noise_percent, description="read noise %", style=st)
        self.array_size = w.IntText(value=array_size, description="array rows=cols", style=st)
        self.error: float | None = None
        self.energy = None
        self._wire([self.adc_bits, self.weight_bits, self.noise_percent, self.array_size], columns=2)

    def config(self, adc_bits: int | None = None) -> CrossbarConfig:
        """The crossbar the controls describe (``adc_bits`` overrides the slider, for the curve)."""
        noise = self.noise_percent.value
        if isinstance(noise, bool) or not isinstance(noise, (int, float)) or not 0 <= noise <= 100:
            raise LabkitError(f"read noise % must be between 0 and 100 (got {noise!r})")
        size = require_positive("array rows=cols", self.array_size.value)
        return CrossbarConfig(rows=size, cols=size, weight_bits=self.weight_bits.value,
                              adc_bits=self.adc_bits.value if adc_bits is None else adc_bits,
                              noise=noise / 100, seed=self.seed)  # fmt: skip

    def compute(self) -> tuple[str, list[Figure]]:
        self.error = self.energy = None
        cfg = self.config()
        error = relative_error(self.layer, self.inputs, cfg)
        curve = [relative_error(self.layer, self.inputs, self.config(b)) for b in CURVE_BITS]
        e = mvm_energy(self.layer.in_features, self.layer.out_features, cfg.adc_bits, cfg.rows, cfg.cols)
        self.error, self.energy = error, e
        text = (f"<b>output error {100 * error:.2f}%</b> of the digital layer's output (digital: 0%), "
                f"{-(-self.layer.in_features // cfg.rows) * -(-self.layer.out_features // cfg.cols)} arrays; "
                f"one product costs {e.crossbar_j * 1e9:.2f} nJ on crossbars against "
                f"{e.digital_j('dram') * 1e9:,.0f} nJ "
                f"with weights moved from DRAM ({e.ratio('dram'):,.0f}x) and {e.digital_j('sram') * 1e9:,.1f} nJ "
                f"from SRAM ({e.ratio('sram'):,.1f}x) (predicted)")
        return text, [self.chart(curve, cfg)]

    def chart(self, curve: list[float], cfg: CrossbarConfig) -> Figure:
        """Error against ADC bits (this setting marked), and the energy of one product by path (log scale)."""
        e = self.energy
        fig, (left, right) = plt.subplots(1, 2, figsize=(8.5, 3.0))
        left.semilogy(CURVE_BITS, [max(c, 1e-6) for c in curve], marker="o", markersize=3)
        left.semilogy([cfg.adc_bits], [max(self.error, 1e-6)], "o", color="#C44E52", markersize=8)
        left.set_xlabel("ADC bits")
        left.set_ylabel("relative output error")
        left.set_title(f"{cfg.rows}x{cfg.cols} arrays, {cfg.weight_bits}-bit weights, "
                       f"{100 * cfg.noise:g}% noise (measured)", fontsize=9)
        labels = ["crossbar", "digital\n(SRAM)", "digital\n(DRAM)"]
        right.bar(labels, [e.crossbar_j * 1e9, e.digital_j("sram") * 1e9, e.digital_j("dram") * 1e9],
                  color=["#C44E52", "#4C72B0", "#4C72B0"])
        right.set_yscale("log")
        right.set_ylabel("nJ per matrix-vector product")
        right.set_title("energy (predicted)", fontsize=9)
        fig.tight_layout()
        plt.close(fig)
        return fig
