"""The crossbar widget of notebook 08: ADC bits, weight bits, read noise, array size and reads against error and energy.

To answer in well under a second it runs one layer, not the whole model: a trained layer and
the inputs it really sees (``CrossbarPanel.from_trainer``: the trained tiny GPT's MLP ``c_proj``
and its inputs on a validation batch, as the notebook uses it; a seeded random layer of the
same shape only when none is given, for tests). Every change reprograms the layer onto
crossbars (``labkit.future.crossbar``), reports its relative output error beside the digital
layer's (zero), draws error against ADC bits at the other settings, and prices one
matrix-vector product with ``labkit.future.pim.mvm_energy`` (``reads`` repeated reads cost that
many conversions). Bad input (negative noise, an array of no rows) shows the message naming
the field, never a traceback.
"""

from __future__ import annotations

import ipywidgets as w
import matplotlib.pyplot as plt
import torch
import torch.nn as nn
from matplotlib.figure import Figure

from labkit.errors import LabkitError
from labkit.future.crossbar import CrossbarConfig, relative_error
from labkit.future.crossbar_study import layer_inputs
from labkit.future.pim import mvm_energy
from labkit.rig.train import Trainer
from labkit.teach.diagnose import same_text
from labkit.teach.widgets import DesignTask, Panel

CURVE_BITS = tuple(range(2, 13, 2))
MIN_ARRAY, MAX_ARRAY = 16, 1024  # rows (= columns) of one crossbar array the panel allows


def default_layer(n_in: int = 256, n_out: int = 64, tokens: int = 64, seed: int = 0) -> tuple[nn.Linear, torch.Tensor]:
    """A seeded random linear layer (the tiny GPT's MLP c_proj shape at d_model 64) and inputs: for tests only."""
    g = torch.Generator().manual_seed(seed)
    layer = nn.Linear(n_in, n_out)
    with torch.no_grad():
        layer.weight.copy_(torch.randn(n_out, n_in, generator=g) * 0.02)
        layer.bias.zero_()
    return layer, torch.randn(tokens, n_in, generator=g)


class CrossbarPanel(Panel):
    """Run one trained layer on analog crossbars and watch its error and its energy per product."""

    def __init__(self, layer: nn.Linear | None = None, inputs: torch.Tensor | None = None, adc_bits: int = 8,
                 weight_bits: int = 6, noise_percent: float = 1.0, array_size: int = 128, seed: int = 0,
                 reads: int = 1) -> None:
        if (layer is None) != (inputs is None):
            raise LabkitError("layer and inputs must be given together (or neither, for the default layer)")
        self.layer, self.inputs = (layer, inputs) if layer is not None else default_layer()
        st = self.STYLE
        self.seed = seed
        self.adc_bits = w.IntSlider(value=adc_bits, min=2, max=12, description="ADC bits", style=st)
        self.weight_bits = w.IntSlider(value=weight_bits, min=1, max=8, description="weight bits", style=st)
        self.noise_percent = w.FloatText(value=noise_percent, description="read noise %", style=st)
        self.array_size = w.IntText(value=array_size, description="array rows=cols", style=st)
        self.reads = w.IntSlider(value=reads, min=1, max=32, description="reads averaged", style=st)
        self.error: float | None = None
        self.energy = None
        self._wire([self.adc_bits, self.weight_bits, self.noise_percent, self.array_size, self.reads], columns=2)

    @classmethod
    def from_trainer(cls, trainer: Trainer, layer: str = "mlp.c_proj", block: int = 0, **kwargs) -> CrossbarPanel:
        """The panel on a trained model's layer and the inputs it sees (``crossbar_study.layer_inputs``)."""
        linear, inputs = layer_inputs(trainer, layer, block)
        return cls(linear, inputs, **kwargs)

    def config(self, adc_bits: int | None = None) -> CrossbarConfig:
        """The crossbar the controls describe (``adc_bits`` overrides the slider, for the curve)."""
        noise = self.noise_percent.value
        if isinstance(noise, bool) or not isinstance(noise, (int, float)) or not 0 <= noise <= 100:
            raise LabkitError(f"read noise % must be between 0 and 100 (got {noise!r})")
        size = self.array_size.value
        if isinstance(size, bool) or not isinstance(size, int) or not MIN_ARRAY <= size <= MAX_ARRAY:
            raise LabkitError(f"array rows=cols must be an integer from {MIN_ARRAY} to {MAX_ARRAY} "
                              f"(got {size!r}); ISAAC's arrays are 128 x 128, PRIME's 256 x 256")
        return CrossbarConfig(rows=size, cols=size, weight_bits=self.weight_bits.value,
                              adc_bits=self.adc_bits.value if adc_bits is None else adc_bits,
                              noise=noise / 100, seed=self.seed, reads=self.reads.value)  # fmt: skip

    def compute(self) -> tuple[str, list[Figure]]:
        self.error = self.energy = None
        cfg = self.config()
        error = relative_error(self.layer, self.inputs, cfg)
        curve = [relative_error(self.layer, self.inputs, self.config(b)) for b in CURVE_BITS]
        e = mvm_energy(self.layer.in_features, self.layer.out_features, cfg.adc_bits, cfg.rows, cfg.cols,
                       input_cycles=cfg.reads)
        self.error, self.energy = error, e
        text = (f"<b>output error {100 * error:.2f}%</b> of the digital layer's output (digital: 0%; measured), "
                f"{cfg.reads} read{'s' if cfg.reads > 1 else ''} averaged, "
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
                       f"{100 * cfg.noise:g}% noise, {cfg.reads} read(s) (measured)", fontsize=9)
        labels = ["crossbar", "digital\n(SRAM)", "digital\n(DRAM)"]
        right.bar(labels, [e.crossbar_j * 1e9, e.digital_j("sram") * 1e9, e.digital_j("dram") * 1e9],
                  color=["#C44E52", "#4C72B0", "#4C72B0"])
        right.set_yscale("log")
        right.set_ylabel("nJ per matrix-vector product")
        right.set_title("energy (predicted)", fontsize=9)
        fig.tight_layout()
        plt.close(fig)
        return fig


SEARCH_ADC_BITS = tuple(range(2, 13))
SEARCH_READS = (1, 2, 4, 8, 16, 32)
ERROR_BOUND = 0.01  # "under 1%": strictly below, judged at full precision


def least_energy(panel: CrossbarPanel, bound: float = ERROR_BOUND) -> float | None:
    """Joules per product of the cheapest standard setting whose output error is under ``bound``, or None.

    Standard settings: ADC bits 2-12, power-of-two arrays from 16 up to the first that holds the
    layer, 1-32 reads in powers of two, 8-bit weights (weight bits cost no energy in
    ``mvm_energy``), at the panel's noise. Candidates are measured in order of energy, and one
    that misses the bound rules out those with no more ADC bits and reads on the same array, so
    the first that meets it is the least energy. Cached per noise level on the panel.
    """
    key = (panel.noise_percent.value, bound)
    cache = panel.__dict__.setdefault("_least_energy", {})
    if key in cache:
        return cache[key]
    n_in, n_out = panel.layer.in_features, panel.layer.out_features
    sizes = [MIN_ARRAY]
    while sizes[-1] < max(n_in, n_out) and sizes[-1] < MAX_ARRAY:
        sizes.append(2 * sizes[-1])
    candidates = sorted((mvm_energy(n_in, n_out, adc, n, n, input_cycles=r).crossbar_j, adc, n, r)
                        for adc in SEARCH_ADC_BITS for n in sizes for r in SEARCH_READS)
    missed: list[tuple[int, int, int]] = []
    cache[key] = None
    for joules, adc, n, r in candidates:
        if any(adc <= a and n == m and r <= k for a, m, k in missed):
            continue
        cfg = CrossbarConfig(rows=n, cols=n, weight_bits=8, adc_bits=adc, noise=panel.noise_percent.value / 100,
                             seed=panel.seed, reads=r)
        if relative_error(panel.layer, panel.inputs, cfg) < bound:
            cache[key] = joules
            break
        missed.append((adc, n, r))
    return cache[key]


def _percent(error: float) -> str:
    """The error in per cent with enough digits that 0.9996% never prints as 1.00%."""
    return same_text(100 * error, 100 * ERROR_BOUND)[0] + "%"


def _under_one_percent(panel: CrossbarPanel) -> tuple[bool, str]:
    if panel.error is None:
        return False, "the panel has no valid result: fix the input it names"
    if panel.noise_percent.value != 2.0:
        return False, f"the task is at 2% read noise (the panel is at {panel.noise_percent.value:g}%)"
    if panel.error >= ERROR_BOUND:
        return False, f"output error {_percent(panel.error)}, not yet under 1%"
    here, best = panel.energy.crossbar_j, least_energy(panel)
    if best is not None and here > best * (1 + 1e-9):
        return False, (f"output error {_percent(panel.error)}, under 1%, at {here * 1e9:.3f} nJ per product; another "
                       "setting stays under 1% for less energy (predicted): try fewer ADC bits, fewer reads or "
                       "another array size")
    return True, (f"output error {_percent(panel.error)} at {here * 1e9:.3f} nJ per product, the least energy of the "
                  "settings under 1% (predicted)")


def design_task() -> DesignTask:
    """Notebook 08's task: under 1% output error at 2% read noise on the trained layer, at the least energy."""
    return DesignTask("Keep the trained layer's output error under 1% at 2% read noise, at the least energy "
                      "per product.", _under_one_percent)
