"""The step's memory timeline: bytes alive over one training step, by category, with phases and layers marked.

Read off the storages ``labkit.measure.fake_step.record_step`` saw arrive and go, each filed under the
category it played in the step: the model's parameters (and buffers), gradients (the storages that became
``p.grad``), optimizer states (AdamW's moments, master weights, step counters), activations (what
autograd saved in forward) and temporaries (everything else: the logits, the gradients flowing back, an
optimizer's scratch tensors, a checkpointed layer's recomputed tensors). The rise through the forward is the
activations piling up, the fall through the backward is them being freed while gradients arrive (Chen et
al. 2016 and Korthikanti et al. 2022 draw the same curve). Works on real tensors (the tiny GPT of
notebook 01) and on fake ones (a 70B step), in the same pass as the step's counts.
"""

from __future__ import annotations

from dataclasses import dataclass

from labkit.measure.fake_step import RecordedStep, layer_label, record_step

CATEGORIES = ("parameters", "gradients", "optimizer states", "activations", "temporaries")


@dataclass(frozen=True)
class Timeline:
    """Bytes alive after each recorded event, by category; phases and layers as (name, first event index)."""

    alive: dict[str, tuple[int, ...]]
    phases: tuple[tuple[str, int], ...]
    layers: tuple[tuple[str, int], ...]
    peak: int
    peak_at: int
    peak_phase: str

    @property
    def events(self) -> int:
        return len(self.alive[CATEGORIES[0]])

    def total(self) -> list[int]:
        """Bytes alive after each event, all categories together."""
        return [sum(v) for v in zip(*(self.alive[c] for c in CATEGORIES), strict=True)]

    def at_peak(self) -> dict[str, int]:
        """Each category's bytes at the step's peak."""
        return {c: self.alive[c][self.peak_at] for c in CATEGORIES}

    def phase_peaks(self) -> dict[str, int]:
        """The most bytes alive in each phase."""
        total, out = self.total(), {}
        bounds = [*self.phases, ("", self.events)]
        for (name, start), (_, end) in zip(bounds, bounds[1:], strict=False):
            if end > start:
                out[name] = max(out.get(name, 0), max(total[start:end]))
        return out

    def trends(self) -> dict[str, bool]:
        """The curve's shape as notebook 01's text states it, one boolean per claim (its cell asserts them).

        Read at the phase boundaries: the forward ends at the activations' most, the backward frees them while the
        gradients arrive, and the optimizer phase ends with no gradient left (``zero_grad(set_to_none=True)``).
        """
        start = dict(self.phases)
        if not {"forward", "backward", "optimizer"} <= set(start):
            return {"the step has forward, backward and optimizer phases": False}
        acts, grads = self.alive["activations"], self.alive["gradients"]
        fwd_end, bwd_end = start["backward"] - 1, start["optimizer"] - 1
        return {"activations rise through the forward pass": acts[fwd_end] == max(acts) > acts[start["forward"]],
                "they fall through the backward": acts[bwd_end] < acts[fwd_end] / 100,
                "while the gradients arrive": grads[bwd_end] > grads[fwd_end],
                "the optimizer step ends with the gradients freed": grads[-1] == 0 < grads[bwd_end]}

    def summary(self) -> str:
        """A few stable lines: the peak, its phase and its categories (bytes, exact)."""
        parts = ", ".join(f"{c} {b:,}" for c, b in self.at_peak().items())
        return (f"{self.events:,} events; peak {self.peak:,} B in the {self.peak_phase} phase: {parts}\n"
                "phase peaks: " + ", ".join(f"{k} {v:,}" for k, v in self.phase_peaks().items()))


def timeline_of(rec: RecordedStep) -> Timeline:
    """The timeline of a recorded step: what it starts with (point 0), then each arrival and free."""
    cur = dict.fromkeys(CATEGORIES, 0)
    series: dict[str, list[int]] = {c: [] for c in CATEGORIES}
    phases: list[tuple[str, int]] = []
    layers: list[tuple[str, int]] = []
    best, best_at, best_phase = -1, 0, ""
    total = 0
    start = 0
    while start < len(rec.events) and rec.events[start].phase == "before":  # what the step starts with: one point
        e = rec.events[start]
        cur[rec.kinds.get(e.uid, "temporaries")] += e.delta
        total, start = total + e.delta, start + 1
    for c in CATEGORIES:
        series[c].append(cur[c])
    phases.append(("before", 0))
    best = total
    for i, e in enumerate(rec.events[start:], start=1):
        kind = rec.kinds.get(e.uid, "temporaries")
        cur[kind] += e.delta
        total += e.delta
        for c in CATEGORIES:
            series[c].append(cur[c])
        if not phases or phases[-1][0] != e.phase:
            phases.append((e.phase, i))
        label = layer_label(e.where.split(" ")[0], rec.blocks) if e.where else ""
        if label.startswith("layer ") and (not layers or layers[-1][0] != label):
            layers.append((label, i))
        if total > best:
            best, best_at, best_phase = total, i, e.phase
    return Timeline({c: tuple(v) for c, v in series.items()}, tuple(phases), tuple(layers), best, best_at,
                    best_phase)


def step_timeline(trainer) -> Timeline:
    """Run one real step of ``trainer`` (after a warm-up step) and return its timeline."""
    return timeline_of(record_step(trainer))
