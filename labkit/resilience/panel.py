"""The fault-tolerance design panel of notebook 06: how much of a failing cluster's time is useful work.

Cluster size, failure rate per GPU-day (typed, or a published trace from ``labkit.references``),
checkpoint size, storage and network bandwidth, and a strategy:

* ``checkpoint-restart``: write the checkpoint to shared storage at C = size / storage bandwidth,
  restart at R = restart overhead + size / storage bandwidth; goodput is Daly's exponential model
  at Daly's interval (``labkit.resilience.interval``; Daly, FGCS 2006);
* ``in-memory peer``: each writer sends its shard to a peer's CPU memory, as Gemini does (Wang et
  al., SOSP 2023): C = size / (writers x network bandwidth), and the restart reads it back the same way.
  The writers are one model-parallel group, as in the notebook's section 7 (``cluster_intervals``):
  data-parallel replicas hold the same state, so one replica writes it (default 128 ranks, TP 8 x PP 16),
  never more than the GPUs there are;
* ``redundant computation``: Bamboo's RC (Thorpe et al., NSDI 2023): no checkpoint, a per-step
  overhead and a failover slowdown from ``labkit.sim`` (1F1B, p stages, m micro-batches, t_b = 2 t_f),
  then ``redundancy.goodput_redundant``.

Every figure is predicted by these formulas, not measured. The storage bandwidth, restart overhead,
failover and replacement times are this panel's starting guesses, not published figures.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import ipywidgets as w
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure

from labkit import hardware
from labkit.errors import LabkitError, require_choice, require_positive
from labkit.references import failure_traces
from labkit.resilience.cluster import checkpoint_bytes
from labkit.resilience.interval import cluster_mtbf_s, daly_interval, goodput_daly
from labkit.resilience.redundancy import failover_step, goodput_redundant, rc_step
from labkit.teach.widgets import Panel, fit_html

STRATEGIES = ("checkpoint-restart", "in-memory peer", "redundant computation")
PLOTS = ("interval", "cluster size")
COLORS = dict(zip(STRATEGIES, ("C0", "C1", "C2"), strict=True))
CUSTOM = "custom"
NETWORK = "ib-ndr"  # one NDR InfiniBand port per GPU, from the hardware catalogue


@dataclass(frozen=True)
class Outcome:
    """One strategy on one cluster: goodput, the GPU-hours it loses a day, and its interval (None for RC)."""

    strategy: str
    goodput: float
    lost_gpu_hours_per_day: float
    interval_s: float | None
    checkpoint_s: float | None
    restart_s: float | None


class ResiliencePanel(Panel):
    """Pick a cluster and a strategy; read the goodput, the lost GPU-hours per day and the interval."""

    def __init__(self, gpus: int = 16384, preset: str = "Llama 3", rate_per_gpu_day: float | None = None,
                 checkpoint_gb: float | None = None, storage_gbps: float = 100.0, network_gbps: float | None = None,
                 restart_s: float = 600.0, strategy: str = "checkpoint-restart", stages: int = 8,
                 microbatches: int = 16, failover_s: float = 60.0, replace_min: float = 60.0,
                 plot: str = "interval", writers: int = 128) -> None:
        st, self.traces = self.STYLE, {t.name: t for t in failure_traces()}
        require_choice("preset", preset, [CUSTOM, *self.traces])
        if rate_per_gpu_day is None:
            rate_per_gpu_day = self.traces[preset].rate_per_gpu_day if preset != CUSTOM else 1e-3
        if checkpoint_gb is None:
            checkpoint_gb = checkpoint_bytes(70_000_000_000) / 1e9  # a 70B model in bf16-mixed: 14 B per parameter
        if network_gbps is None:
            network_gbps = hardware.link(NETWORK).bandwidth / 1e9
        self.gpus = w.IntText(value=gpus, description="GPUs", style=st)
        self.preset = w.Dropdown(options=[CUSTOM, *self.traces], value=preset, description="failure trace", style=st)
        self.rate = w.FloatText(value=rate_per_gpu_day, description="failures/GPU-day", style=st)
        self.checkpoint_gb = w.FloatText(value=checkpoint_gb, description="checkpoint GB", style=st)
        self.storage_gbps = w.FloatText(value=storage_gbps, description="storage GB/s", style=st)
        self.network_gbps = w.FloatText(value=network_gbps, description="net GB/s/GPU", style=st)
        self.writers = w.IntText(value=writers, description="peer: writers", style=st)
        self.restart_s = w.FloatText(value=restart_s, description="restart s", style=st)
        self.strategy = w.Dropdown(options=list(STRATEGIES), value=require_choice("strategy", strategy, STRATEGIES),
                                   description="strategy", style=st)
        self.stages = w.IntText(value=stages, description="RC: stages", style=st)
        self.microbatches = w.IntText(value=microbatches, description="RC: micro-batches", style=st)
        self.failover_s = w.FloatText(value=failover_s, description="RC: failover s", style=st)
        self.replace_min = w.FloatText(value=replace_min, description="RC: replace min", style=st)
        self.plot = w.Dropdown(options=list(PLOTS), value=require_choice("plot", plot, PLOTS),
                               description="goodput vs", style=st)
        self.outcome: Outcome | None = None
        self.preset.observe(self._preset_changed, names="value")  # before _wire: the rate is set, then drawn
        self.rate.observe(self._rate_changed, names="value")
        self._wire([self.gpus, self.preset, self.rate, self.checkpoint_gb, self.storage_gbps, self.network_gbps,
                    self.writers, self.restart_s, self.strategy, self.stages, self.microbatches, self.failover_s,
                    self.replace_min, self.plot], columns=3)

    def _preset_changed(self, change: dict) -> None:
        if change["new"] in self.traces:
            self.rate.value = self.traces[change["new"]].rate_per_gpu_day

    def _rate_changed(self, change: dict) -> None:
        trace = self.traces.get(self.preset.value)
        if trace is not None and change["new"] != trace.rate_per_gpu_day:
            self.preset.value = CUSTOM  # a typed rate is no longer the trace's

    @staticmethod
    def _number(field: str, value: float, *, zero_ok: bool = False) -> float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        if not ok or value < 0 or (value == 0 and not zero_ok):
            raise LabkitError(f"{field} must be a {'non-negative' if zero_ok else 'positive'} number (got {value!r})")
        return float(value)

    def _rc_factors(self) -> tuple[float, float]:
        """RC's step overhead and failover slowdown from the simulated 1F1B pipeline."""
        p, m = require_positive("RC: stages", self.stages.value), require_positive("RC: micro-batches",
                                                                                   self.microbatches.value)
        if p < 2 or m < p:
            raise LabkitError(f"RC: stages must be >= 2 and RC: micro-batches >= stages for 1F1B (got {p}, {m})")
        if p * m > 4096:
            raise LabkitError(f"RC: stages x micro-batches must be at most 4096 to simulate here (got {p * m})")
        step = rc_step("1f1b", p, m)
        return step.overhead, failover_step("1f1b", p, m).makespan / step.plain_s

    def evaluate(self, strategy: str, gpus: int, rc: tuple[float, float] | None = None) -> Outcome:
        """One strategy at ``gpus`` GPUs with the panel's other fields (checked, in seconds and bytes)."""
        rate = self._number("failures/GPU-day", self.rate.value)
        mtbf = cluster_mtbf_s(rate, require_positive("GPUs", gpus))
        size = self._number("checkpoint GB", self.checkpoint_gb.value) * 1e9
        restart = self._number("restart s", self.restart_s.value, zero_ok=True)
        if strategy == "redundant computation":
            o, s = rc or self._rc_factors()
            fo = self._number("RC: failover s", self.failover_s.value, zero_ok=True)
            rep = 60 * self._number("RC: replace min", self.replace_min.value, zero_ok=True)
            if fo + rep >= mtbf:
                raise LabkitError(f"RC: failover s + RC: replace min ({(fo + rep) / 60:.1f} min) must be shorter than "
                                  f"the MTBF ({mtbf / 60:.1f} min): failures would come faster than replacements")
            g = goodput_redundant(o, s, fo, rep, rate, gpus).goodput
            return Outcome(strategy, g, (1 - g) * gpus * 24, None, None, None)
        if strategy == "checkpoint-restart":
            c = size / (self._number("storage GB/s", self.storage_gbps.value) * 1e9)
        else:
            writers = min(gpus, require_positive("peer: writers", self.writers.value))
            c = size / (writers * self._number("net GB/s/GPU", self.network_gbps.value) * 1e9)
        tau = daly_interval(c, mtbf)
        g = goodput_daly(tau, c, restart + c, mtbf)
        return Outcome(strategy, g, (1 - g) * gpus * 24, tau, c, restart + c)

    def _percent(self, strategy: str, gpus: int, rc: tuple[float, float]) -> float:
        """Goodput in percent, or NaN where the model does not hold (RC once failures outpace replacements)."""
        try:
            return 100 * self.evaluate(strategy, gpus, rc).goodput
        except LabkitError:
            return math.nan

    def compute(self) -> tuple[str, list[Figure]]:
        self.outcome = None
        strategy, gpus = require_choice("strategy", self.strategy.value, STRATEGIES), self.gpus.value
        rate = self._number("failures/GPU-day", self.rate.value)
        mtbf = cluster_mtbf_s(rate, require_positive("GPUs", gpus))
        for field, control in (("checkpoint GB", self.checkpoint_gb), ("storage GB/s", self.storage_gbps),
                               ("net GB/s/GPU", self.network_gbps)):
            self._number(field, control.value)  # every field is checked, whichever strategy is shown
        for field, control in (("restart s", self.restart_s), ("RC: failover s", self.failover_s),
                               ("RC: replace min", self.replace_min)):
            self._number(field, control.value, zero_ok=True)
        rc = self._rc_factors()
        outcomes: dict[str, Outcome] = {}
        for name in STRATEGIES:
            try:
                outcomes[name] = self.evaluate(name, gpus, rc)
            except LabkitError:
                if name == strategy:
                    raise  # the chosen strategy's error is the message; another's only leaves its curve out
        out = self.outcome = outcomes[strategy]
        verdict = fit_html(out.goodput >= 0.9, f"{strategy}: goodput {100 * out.goodput:.1f}%, "
                           f"{out.lost_gpu_hours_per_day:,.0f} GPU-hours lost per day")
        where = (f"checkpoint every {_minutes(out.interval_s)} (Daly), write {out.checkpoint_s:.3g} s, restart "
                 f"{out.restart_s:.0f} s" if out.interval_s is not None else
                 f"no checkpoint; RC overhead {100 * rc[0]:.1f}% per step, failover slowdown {rc[1]:.2f}x")
        text = (f"{verdict}; {where}; {86400 / mtbf:.1f} failures per day, MTBF {mtbf / 3600:.2f} h "
                "(predicted)")
        return text, [self.chart(gpus, mtbf, outcomes, rc, strategy)]

    def chart(self, gpus: int, mtbf: float, outcomes: dict[str, Outcome], rc: tuple[float, float],
              strategy: str) -> Figure:
        """Goodput against checkpoint interval (RC: a flat line), or against cluster size, every strategy."""
        fig, ax = plt.subplots(figsize=(6.0, 3.4))
        if self.plot.value == "interval":
            taus = [o.interval_s for o in outcomes.values() if o.interval_s is not None]
            xs = np.geomspace(min(taus) / 20, max(taus) * 20, 80)
            for name, o in outcomes.items():
                style = {"label": name, "color": COLORS[name], "linewidth": 2 if name == strategy else 1}
                if o.interval_s is None:
                    ax.axhline(100 * o.goodput, **style)
                    continue
                ys = [100 * goodput_daly(float(x), o.checkpoint_s, o.restart_s, mtbf) for x in xs]
                ax.plot(xs, ys, **style)
                ax.plot([o.interval_s], [100 * o.goodput], "ko", markersize=4)
            ax.set_xlabel("checkpoint interval (s, log)")
        else:
            sizes = np.unique(np.geomspace(8, max(64, 8 * gpus), 30).astype(int))
            for name in STRATEGIES:
                ys = [self._percent(name, int(n), rc) for n in sizes]
                ax.plot(sizes, ys, label=name, color=COLORS[name], linewidth=2 if name == strategy else 1)
            ax.axvline(gpus, color="grey", linestyle=":", linewidth=1)
            ax.set_xlabel("GPUs in the job (log)")
        ax.set_xscale("log")
        ax.set_ylabel("goodput (%)")
        ax.set_title("Useful work under failures (predicted)", loc="left", fontsize=10)
        ax.legend(frameon=False, fontsize=8)
        fig.tight_layout()
        plt.close(fig)
        return fig


def _minutes(seconds: float | None) -> str:
    if seconds is None:
        return "never"
    return f"{seconds / 60:.1f} min" if seconds >= 60 else f"{seconds:.2g} s"
