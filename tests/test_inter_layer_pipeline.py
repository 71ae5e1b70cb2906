"""Pipelines on real ranks: torch's order is the simulator's, losses are one process's, activations are the schedule's.

Each configuration runs once (a module fixture) and every check reads that run. Losses
are compared with a relative tolerance of 1e-5: the pipeline sums the loss and the
gradients micro-batch by micro-batch, one process sums them over the full batch, so
only float rounding (about 1e-7 relative) separates them. Timings are printed, not
asserted, except the bubble's direction: GPipe with one micro-batch on 2 ranks idles
at least half the step (its four actions wait on each other), and with 8 micro-batches
of a larger model its least disturbed step (of 3) idles less.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from labkit.errors import LabkitError
from labkit.inter_layer.pipeline import (
    PipelineConfig,
    PipelineRun,
    measured_bubble,
    run_pipeline,
    run_pipelines,
    single_process_losses,
    timeline_of,
    train_pipeline,
)
from labkit.sim import peak_in_flight, schedule
from labkit.teach.plots import gantt

ROOT = Path(__file__).resolve().parent.parent
BIG = {"d_model": 128, "n_head": 4, "seq_len": 64}  # micro-batches big enough that compute outweighs messaging
CASES = {  # name: (p, config); runs with the same p share one process group
    "gpipe p2 m4": (2, PipelineConfig("gpipe", 4)),
    "1f1b p2 m4": (2, PipelineConfig("1f1b", 4)),
    "interleaved p2 v2 m4": (2, PipelineConfig("interleaved", 4, v=2)),
    "gpipe p2 m1 big": (2, PipelineConfig("gpipe", 1, steps=3, model=BIG, batch_size=32)),
    "gpipe p2 m8 big": (2, PipelineConfig("gpipe", 8, steps=3, model=BIG, batch_size=32)),
    "gpipe p4 m8": (4, PipelineConfig("gpipe", 8)),
    "1f1b p4 m8": (4, PipelineConfig("1f1b", 8)),
}


@pytest.fixture(scope="module")
def runs() -> dict[str, PipelineRun]:
    out = {}
    for p in (2, 4):
        names = [n for n, (q, _) in CASES.items() if q == p]
        out.update(zip(names, run_pipelines(p, [CASES[n][1] for n in names]), strict=True))
    return out


def test_every_rank_runs_the_simulators_order_at_every_step(runs):
    for name, run in runs.items():
        c = run.config
        expected = schedule(c.kind, run.p, c.m, c.v)
        for r in run.ranks:
            for step, order in enumerate(r["orders"]):
                assert order == expected[r["rank"]], (name, r["rank"], step)


def test_losses_match_one_process_on_the_full_batch(runs):
    references = {}
    for name, run in runs.items():
        c = run.config
        key = (c.steps, str(c.model), c.batch_size)
        if key not in references:
            references[key] = single_process_losses(c.steps, c.model, c.batch_size, c.seed, c.lr)
            assert references[key][-1] < references[key][0]  # later steps saw the earlier updates
        assert run.losses == pytest.approx(references[key], rel=1e-5), name


def test_peak_activations_are_the_schedules_micro_batches_in_flight(runs):
    """GPipe holds m micro-batches on every rank, 1F1B p - r on rank r, interleaved what its order implies.

    Every micro-batch saves tensors of the same shapes, so the measured peak is exact;
    the 1% tolerance would absorb a storage shared between micro-batches (a cached
    constant), which is counted once.
    """
    rows = []
    for name, run in runs.items():
        c = run.config
        order = schedule(c.kind, run.p, c.m, c.v)
        for r, measured, predicted in zip(run.ranks, run.peak_microbatches, run.predicted_microbatches, strict=True):
            in_flight = peak_in_flight(order[r["rank"]]) / c.v
            rows.append(f"{name:22s} rank {r['rank']}  measured {measured:6.3f}  predicted {predicted:6.3f}  "
                        f"in flight/v {in_flight:5.2f}  one micro-batch {r['microbatch_bytes']} B")
            assert measured == pytest.approx(predicted, rel=0.01), (name, r["rank"])
            assert r["held_after_step"] == [0] * c.steps  # backward released every saved tensor
            if c.v == 1:
                assert measured == pytest.approx(in_flight, rel=0.01), (name, r["rank"])
        if c.kind == "gpipe":
            assert run.peak_microbatches[0] == pytest.approx(c.m, rel=0.01)
        if c.kind == "1f1b":
            assert run.peak_microbatches == pytest.approx([min(run.p - r, c.m) for r in range(run.p)], rel=0.01)
    print("\nPeak saved activations per rank, in micro-batches\n" + "\n".join(rows))


def test_bubble_is_reported_and_shrinks_with_more_micro_batches(runs):
    print("\nMeasured bubble per step vs (p-1)/(v*m+p-1), and the wall time of the last step")
    for name, run in runs.items():
        steps = [measured_bubble(timeline_of(run.ranks, k)) for k in range(run.config.steps)]
        assert all(0 < b < 1 for b in steps), name
        print(f"{name:22s} measured {' '.join(f'{b:.3f}' for b in steps)}  predicted {run.predicted_bubble:.3f}  "
              f"last step {run.step_seconds * 1e3:.1f} ms")
    one, eight = (min(measured_bubble(timeline_of(runs[n].ranks, k)) for k in range(3))
                  for n in ("gpipe p2 m1 big", "gpipe p2 m8 big"))
    assert one >= 0.5 - 1e-6  # with m=1 the four actions depend on each other: no two run at once
    assert eight < one
    tl = runs["1f1b p4 m8"].timeline
    assert tl.streams == [f"rank {r}" for r in range(4)]
    assert {e.meta["phase"] for e in tl.events} == {"F", "B"} and min(e.start for e in tl.events) == 0.0
    assert gantt(tl, title="1F1B, 4 ranks, 8 micro-batches (measured)", time_unit="ms").axes


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"kind": "zigzag", "p": 2, "m": 4}, "kind must be one of gpipe, 1f1b, interleaved"),
        ({"kind": "gpipe", "p": 3, "m": 4}, r"p\*v \(number of stages\) must divide n_layer=4: allowed 1, 2, 4"),
        ({"kind": "1f1b", "p": 4, "m": 2}, "m must be >= p for 1f1b"),
        ({"kind": "interleaved", "p": 2, "m": 4, "v": 1}, r"v \(chunks per rank\) must be >= 2"),
        ({"kind": "interleaved", "p": 2, "m": 5, "v": 2}, "m must be a multiple of the number of rounds"),
        ({"kind": "gpipe", "p": 2, "m": 4, "v": 2}, r"v \(chunks per rank\) must be 1 for kind='gpipe'"),
        ({"kind": "gpipe", "p": 2, "m": 3}, r"m \(micro-batches\) must divide batch_size=8: allowed 1, 2, 4, 8"),
        ({"kind": "gpipe", "p": 2, "m": 4, "steps": 0}, "steps must be a positive integer"),
        ({"kind": "gpipe", "p": 2, "m": 4, "model": {"dropout": 0.1}}, "model dropout must be 0.0"),
    ],
)
def test_bad_input_names_the_field(kwargs, message):
    with pytest.raises(LabkitError, match=message):
        run_pipeline(**kwargs)


def test_the_worker_checks_its_input_before_touching_the_group():
    with pytest.raises(LabkitError, match="kind must be one of"):
        train_pipeline(0, 2, kind="zigzag")


def test_same_worker_runs_under_torchrun_on_loopback(torchrun):
    result = torchrun("labkit.inter_layer.pipeline", "--schedule", "1f1b", "--microbatches", "4", "--steps", "1")
    assert result["rank"] == 0 and result["stages"] == [0]
    assert result["orders"][0] == [str(a) for a in schedule("1f1b", 2, 4)[0]]
    assert result["peak_bytes"] == pytest.approx(2 * result["microbatch_bytes"], rel=0.01)
