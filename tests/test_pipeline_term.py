"""Issue 29: the pipeline's step in ``costing`` is the step the 1F1B and interleaved timelines of ``labkit.sim`` show.

Each micro-batch's kernels on the slowest stage (with Megatron-LM 2021's unfused gradient accumulation) and its
stage-to-stage sends, replayed by ``simulate_pipeline`` (torch's orders), give the advisor's compute + tp + pp +
bubble within 3%, and the gradient accumulation shows in both as the same seconds per micro-batch."""

from __future__ import annotations

import pytest

from labkit.advisor import calibration, costing, steptime
from labkit.advisor.costing import Layout
from labkit.shapes import ModelShape
from labkit.sim import simulate_pipeline


def _row(i: int):
    row = calibration.rows("table1")[i]
    shape = ModelShape("sc21", row["layers"], row["hidden"], row["heads"], 51200, 2048)
    return row, shape


@pytest.mark.parametrize(("i", "schedule"), [(4, "1f1b"), (4, "interleaved"), (6, "1f1b"), (6, "interleaved")])
def test_costing_step_is_the_simulated_timeline(i: int, schedule: str) -> None:
    row, shape = _row(i)
    t, p = row["tp"], row["pp"]
    v = calibration.chunks_for(row["layers"], p) if schedule == "interleaved" else 1
    lay = Layout(row["gpus"] // (t * p), t, p, 1, 0, "full", schedule=schedule, chunks=v, sp=False,
                 attention="explicit")
    mc = costing.machine("A100-80GB", row["gpus"], host="dgx-a100-host", framework="megatron-2021")
    times = costing.step_times(shape, 2048, row["batch"], lay, mc)
    m = costing.microbatches(row["batch"], lay)
    per_mb = (times["compute"] + times["tp"]) / m
    send = times["pp"] / m / (2 * v)
    sim = simulate_pipeline(schedule, p, m, per_mb / 4, 3 * per_mb / 4, send, v)  # F : (recompute + B) = 1 : 3
    model = times["compute"] + times["tp"] + times["pp"] + times["bubble"]
    assert sim.makespan == pytest.approx(model, rel=0.03)
    params = shape.params / (t * p)
    accum = steptime.grad_accum_seconds(params, mc.cluster.device, mc.profile)
    assert accum > 0.02 * per_mb  # 2021's main_grad pass is a real share of a micro-batch
    lighter = simulate_pipeline(schedule, p, m, per_mb / 4, 3 * per_mb / 4 - accum, send, v)
    bubble_share = 1 + (p - 1) / (v * m)
    assert sim.makespan - lighter.makespan == pytest.approx(m * accum * bubble_share, rel=0.05)
