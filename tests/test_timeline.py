"""The step's memory timeline and its memory_viz snapshot, on a real tiny GPT step and a fake full-width one.

The timeline's peak is the whole-step peak the lab's counter measures (``whole_step_peak``, a separate
step), its categories at the start are the model states, and the phases come in order; the snapshot
replays to the measured peak, ``python -m torch.cuda._memory_viz trace`` reads it, and its ``trace_plot``
renders it. Cost: about 6 s on 2 cores (one subprocess for memory_viz's command line).
"""

from __future__ import annotations

import pickle
import subprocess
import sys

import matplotlib
import pytest

from labkit.measure import whole_step_peak
from labkit.measure.fake_step import record_step
from labkit.measure.snapshot import replayed_peak, snapshot_of, write_snapshot
from labkit.measure.timeline import CATEGORIES, timeline_of
from labkit.rig.model import GPTConfig
from labkit.rig.train import TrainConfig, Trainer

matplotlib.use("Agg")


@pytest.fixture(scope="module")
def tiny():
    t = Trainer(TrainConfig(model=GPTConfig(vocab_size=35, n_layer=3, n_head=2, d_model=32, seq_len=16),
                            batch_size=2, threads=1))
    t.step()
    rec = record_step(t)
    return t, rec, timeline_of(rec)


def test_timeline_peak_is_the_measured_peak(tiny):
    trainer, rec, tl = tiny
    assert tl.peak == rec.peak.peak == whole_step_peak(trainer).peak
    assert max(tl.total()) == tl.peak and tl.total()[tl.peak_at] == tl.peak
    assert [p for p, _ in tl.phases] == ["before", "forward", "backward", "optimizer"]
    start = {c: tl.alive[c][0] for c in CATEGORIES}
    assert start["parameters"] == rec.memory.parameters + sum(b.nbytes for b in trainer.model.buffers())
    assert start["gradients"] == start["activations"] == start["temporaries"] == 0
    assert max(tl.alive["activations"]) == rec.memory.activations  # all saved tensors alive at forward's end
    assert max(tl.alive["gradients"]) == rec.memory.gradients
    assert [label for label, _ in tl.layers][:3] == ["layer 0", "layer 1", "layer 2"]


def test_the_curve_s_shape_holds_and_a_flat_one_fails(tiny):
    from dataclasses import replace

    _, _, tl = tiny
    assert all(tl.trends().values()), tl.trends()
    flat = replace(tl, alive={**tl.alive, "gradients": (0,) * tl.events})
    assert not flat.trends()["while the gradients arrive"]
    assert replace(tl, phases=tl.phases[:2]).trends() == {"the step has forward, backward and optimizer phases": False}


def test_phase_peaks_match_the_counter(tiny):
    _, rec, tl = tiny
    assert {k: v for k, v in tl.phase_peaks().items() if k != "before"} == rec.peak.by_phase


def test_snapshot_replays_to_the_peak_and_memory_viz_reads_it(tiny, tmp_path):
    from torch.cuda import _memory_viz

    _, rec, tl = tiny
    path = write_snapshot(rec, tmp_path / "step.pickle")
    with path.open("rb") as f:
        snap = pickle.load(f)  # noqa: S301 - the file this test just wrote
    assert snap == snapshot_of(rec)
    assert replayed_peak(snap) == pytest.approx(rec.peak.peak, rel=5e-3)
    out = subprocess.run([sys.executable, "-m", "torch.cuda._memory_viz", "trace", str(path)], capture_output=True,
                         text=True, timeout=120, check=True).stdout
    assert f"{len(snap['device_traces'][0])} entries" in out
    assert "<html" in _memory_viz.trace_plot(snap).lower()


def test_fake_full_width_step_snapshot():
    from labkit.measure.fake_full import measure_full

    r = measure_full("llama-2-7b", 1, 128, "bf16-mixed", layers=1, progress=lambda s: None)
    tl = timeline_of(r.recorded)
    assert tl.peak == r.peak["measured"]
    assert replayed_peak(snapshot_of(r.recorded)) == tl.peak


def test_plots_are_figures(tiny):
    from labkit.teach.plots_timeline import timeline_plot, timelines_side_by_side

    _, _, tl = tiny
    import matplotlib.pyplot as plt

    fig = timeline_plot(tl)
    assert repr(fig).startswith("<Figure size 800x360")
    assert fig.number not in plt.get_fignums()  # closed once drawn: a notebook shows the returned figure once
    assert "with 2 Axes" in repr(timelines_side_by_side([tl, tl], ["a", "b"]))
