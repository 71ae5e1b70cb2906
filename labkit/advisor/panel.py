"""The design panel of notebook 09: a model, a cluster and a goal in; the advisor's ranked plans out.

Each change reruns ``search.advise`` (a fraction of a second for GPT-3 on 1,024 GPUs) and shows
the best plans, how many combinations each rule rejected, and the selection flow with the best
plan's path lit. Every figure is predicted by the advisor's models, not measured.
"""

from __future__ import annotations

import html

import ipywidgets as w
from matplotlib.figure import Figure

from labkit import hardware
from labkit.advisor import flow, search
from labkit.advisor.report import plans_table
from labkit.errors import LabkitError
from labkit.predict.profiles import DEFAULT_FRAMEWORK, FRAMEWORKS, profile
from labkit.shapes import model_names, model_shape
from labkit.teach.widgets import Panel, fit_html


class AdvisorPanel(Panel):
    """Pick a model, a GPU and its count, a global batch, a sequence length, a goal and the framework."""

    def __init__(self, model: str = "gpt3-175b", gpu: str = "A100-80GB", gpus: int = 1024, batch: int = 1536,
                 seq: int = 2048, goal: str = "fastest", top: int = 5, framework: str = DEFAULT_FRAMEWORK) -> None:
        st = self.STYLE
        self.top = top
        self.model = w.Dropdown(options=model_names(), value=model_shape(model).name, description="model", style=st)
        self.gpu = w.Dropdown(options=hardware.load_catalogue().gpu_names(), value=hardware.gpu(gpu).name,
                              description="GPU", style=st)
        self.gpus = w.IntText(value=gpus, description="GPUs", style=st)
        self.batch = w.IntText(value=batch, description="global batch", style=st)
        self.seq = w.IntText(value=seq, description="sequence", style=st)
        self.goal = w.Dropdown(options=list(search.GOALS), value=goal, description="goal", style=st)
        self.framework = w.Dropdown(options=list(FRAMEWORKS), value=profile(framework).name, description="framework",
                                    style=st)
        self.advice: search.Advice | None = None
        self._wire([self.model, self.gpu, self.gpus, self.batch, self.seq, self.goal, self.framework], columns=2)

    def compute(self) -> tuple[str, list[Figure]]:
        for name, box in (("gpus", self.gpus), ("batch", self.batch), ("seq", self.seq)):
            if box.value is None or box.value <= 0:
                raise LabkitError(f"{name} must be a positive integer (got {box.value!r})")
        self.advice = a = search.advise(self.model.value, self.batch.value, self.gpu.value, self.gpus.value,
                                        self.goal.value, seq=self.seq.value, framework=self.framework.value)
        rejected = ", ".join(f"{rule} {n}" for rule, n in a.reasons().items()) or "none"
        if a.best is None:
            text = f"no plan fits {self.model.value} on {self.gpus.value} x {self.gpu.value} (rejected: {rejected})"
            return fit_html(False, text), [flow.draw(a, title="no feasible plan")]
        b = a.best
        head = fit_html(True, f"best for {self.goal.value}: {b.layout.label}, {b.step_s:.2f} s a step, "
                              f"{b.tokens_per_s_per_gpu:,.0f} tokens/s and {b.model_tflops_per_gpu:,.0f} TFLOP/s per "
                              f"GPU, MFU {100 * b.mfu:.0f}%, {b.memory_bytes / 1e9:.1f} GB per GPU; framework "
                              f"{a.framework} (predicted)")
        table = html.escape(plans_table(a.kept[: self.top]))
        note = html.escape(f"{len(a.kept)} plans kept; rejected by the first rule broken: {rejected}")
        return f"{head}<pre style='font-size:11px'>{table}\n{note}</pre>", [flow.draw(a)]
