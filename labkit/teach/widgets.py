"""ipywidgets panels the notebooks share; each can be driven without a browser.

A panel keeps its logic in ``update()``, which the widgets call on every change
and tests call directly: it computes with ``labkit.predict.estimate``, writes a one-line
verdict (or the error message of bad input) into ``message``, and draws the figure
into ``output``. Bad input never raises out of a callback: the panel shows the
message that names the field and the allowed values.
"""

from __future__ import annotations

import html
from collections.abc import Callable
from dataclasses import dataclass

import ipywidgets as w
from IPython.display import display
from matplotlib.figure import Figure

from labkit import hardware
from labkit.errors import LabkitError, require_positive
from labkit.predict.estimate import PRECISIONS, RECOMPUTE, ZERO_STAGES, MemoryEstimate, TrainingSetup, estimate_memory
from labkit.shapes import model_names, model_shape
from labkit.teach import plots


def verdict(est: MemoryEstimate) -> str:
    """'fits, 12.3 GB to spare' or 'does not fit: short by 40.1 GB': one unit, GB (1e9 bytes), throughout."""
    total = est.per_device_bytes["total"] / 1e9
    if est.peak_bytes is not None:  # one GPU's step: judged on its predicted whole-step peak
        total = est.peak_bytes / 1e9
    what = "GB per GPU" if est.peak_bytes is None else f"GB whole-step peak ({est.peak_phase})"
    cap = f"{est.gpu} ({est.device_bytes / 1e9:.1f} GB, its true capacity)"
    if est.fits:
        return f"{total:.1f} {what}: fits on {cap}, {est.headroom_bytes / 1e9:.1f} GB to spare"
    return f"{total:.1f} {what}: does not fit on {cap}, short by {-est.headroom_bytes / 1e9:.1f} GB"


@dataclass(frozen=True)
class DesignTask:
    """A goal for a panel and the check that says whether the panel's current setting meets it, and why not.

    ``check(panel)`` returns (met, reason). A task is only fair if some setting of the panel
    meets it: the tests find one programmatically for every task the lab sets.
    """

    goal: str
    check: Callable[[Panel], tuple[bool, str]]
    key: str = ""  # its stable id ("01.design"), what the journal records it under


class Panel:
    """Controls, a one-line message and figures: ``compute()`` does the work, ``update()`` shows it.

    Subclasses build their controls, then call ``_wire(controls, columns)``; their
    ``compute()`` returns (message HTML, figures) or raises LabkitError, which the
    panel shows as a message in place of the figures (never a traceback).
    ``set_task(task)`` adds the goal and a "Check my design" button under the controls.
    """

    STYLE = {"description_width": "110px"}
    task: DesignTask | None = None

    def set_task(self, task: DesignTask) -> Panel:
        """Show ``task``'s goal and a button that checks the current setting against it; returns the panel."""
        self.task = task
        self.check_button = w.Button(description="Check my design", button_style="info")
        self.task_result = w.HTML()
        self.check_button.on_click(lambda _b: self.check_design())
        goal = w.HTML(f"<b>Design task:</b> {html.escape(task.goal)}")
        self.ui.children = (*self.ui.children[:1], goal, w.HBox([self.check_button, self.task_result]),
                            *self.ui.children[1:])  # fmt: skip
        return self

    def check_design(self) -> tuple[bool, str]:
        """Judge the current setting against the task; the verdict is shown beside the button and returned."""
        if self.task is None:
            raise LabkitError("task must be set first: panel.set_task(DesignTask(...))")
        try:
            met, reason = self.task.check(self)
        except LabkitError as err:
            met, reason = False, f"the current setting is not valid input: {err}"
        from labkit.teach.journal import record

        record("design", self.task.key or self.task.goal, self.settings(), met, "" if met else reason, reason=reason)
        self.task_result.value = fit_html(met, ("Goal met: " if met else "Not yet: ") + reason)
        return met, reason

    def _wire(self, controls: list[w.Widget], columns: int = 2) -> None:
        self.message = w.HTML()
        self.output = w.Output()
        self.figures: list[Figure] = []
        self._held = False
        self._controls = {id(c) for c in controls}
        for c in controls:
            c.observe(lambda _change: None if self._held else self.update(), names="value")
        per = -(-len(controls) // columns)
        cols = [w.VBox(controls[i : i + per]) for i in range(0, len(controls), per)]
        self.ui = w.VBox([w.HBox(cols), self.message, self.output])
        self.update()

    def compute(self) -> tuple[str, list[Figure]]:
        raise NotImplementedError

    def settings(self) -> dict[str, object]:
        """The controls' values by attribute name: what ``set_values`` takes back (a hand-in's design record)."""
        return {name: v.value for name, v in vars(self).items() if id(v) in getattr(self, "_controls", ())}

    def set_values(self, **values: object) -> bool:
        """Set several controls at once and redraw once (a search over settings, or a test)."""
        self._held = True
        try:
            for name, value in values.items():
                getattr(self, name).value = value
        finally:
            self._held = False
        return self.update()

    def update(self) -> bool:
        """Recompute and redraw; on bad input show the message that names the field. True when it drew."""
        try:
            message, figures = self.compute()
        except LabkitError as err:
            self.figures = []
            self.message.value = f"<b style='color:#b00'>bad input:</b> {html.escape(str(err))}"
            self.output.clear_output()
            return False
        self.message.value, self.figures = message, figures
        self.output.clear_output(wait=True)
        with self.output:
            for fig in figures:
                display(fig)
        return True

    def _ipython_display_(self) -> None:
        display(self.ui)


def fit_html(ok: bool, text: str) -> str:
    """A verdict in green (fits) or red (does not), escaped."""
    return f"<b style='color:{'#070' if ok else '#b00'}'>{html.escape(text)}</b>"


class MemoryPanel(Panel):
    """Model preset, micro-batch, sequence, precision, recompute, ZeRO stage, DP degree, GPU."""

    def __init__(self, model: str = "llama2-7b", gpu: str = "RTX-4090", micro_batch: int = 1,
                 seq: int = 2048, precision: str = "bf16-mixed", recompute: str = "none",
                 zero_stage: int = 0, dp: int = 1) -> None:
        style = self.STYLE
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
        self.estimate: MemoryEstimate | None = None
        self._wire([self.model, self.gpu, self.micro_batch, self.seq, self.precision, self.recompute,
                    self.zero_stage, self.dp])

    @property
    def figure(self) -> Figure | None:
        return self.figures[0] if self.figures else None

    def setup(self) -> TrainingSetup:
        # the estimate reads seq 0 as "the model's own": from the panel, 0 is a slip, refused, never replaced
        require_positive("sequence", self.seq.value)
        return TrainingSetup(
            model_shape(self.model.value), micro_batch=self.micro_batch.value, seq=self.seq.value,
            precision=self.precision.value, recompute=self.recompute.value,
            zero_stage=self.zero_stage.value, dp=self.dp.value,
        )

    def compute(self) -> tuple[str, list[Figure]]:
        self.estimate = None
        device = hardware.gpu(self.gpu.value)
        est = estimate_memory(self.setup(), device.memory_bytes, device.name)
        self.estimate = est
        share = f"activations are {100 * est.activation_share:.0f}% of it"
        figure = plots.memory_bars({est.setup["shape"]["name"]: est.per_device_bytes},
                                   capacity_bytes=device.memory_bytes, capacity_label=device.name)
        return f"{fit_html(bool(est.fits), verdict(est))}; {share}", [figure]
