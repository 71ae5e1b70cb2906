"""Widget callbacks and self-check exercises, exercised without a browser."""

import pytest

from labkit.errors import LabkitError
from labkit.intra_layer import exercises as _exercises_03  # noqa: F401 - registers the 03.* exercises
from labkit.predict.tables import estimate_table, text_table
from labkit.teach import checks
from labkit.teach.widgets import MemoryPanel


def test_panel_reports_fit_and_redraws_on_change():
    panel = MemoryPanel(model="llama2-7b", gpu="RTX-4090", seq=2048)
    assert panel.estimate is not None and not panel.estimate.fits
    assert "does not fit on RTX-4090" in panel.message.value and "short by" in panel.message.value
    first = panel.figure
    panel.model.value = "gpt2"
    panel.seq.value = 1024
    assert panel.estimate.fits and "to spare" in panel.message.value
    assert panel.figure is not first and panel.figure.axes[0].patches


def test_panel_zero_stage_and_dp_shrink_the_bar():
    panel = MemoryPanel(model="llama2-7b", gpu="H100-SXM", seq=2048)
    before = panel.estimate.per_device_bytes["total"]
    panel.dp.value = 8
    panel.zero_stage.value = 3
    assert panel.estimate.per_device_bytes["total"] < before / 2


@pytest.mark.parametrize("widget, value, field", [("dp", 0, "dp"), ("micro_batch", -1, "micro_batch"),
                                                  ("seq", -5, "seq")])
def test_panel_shows_bad_input_as_a_message(widget, value, field):
    panel = MemoryPanel()
    getattr(panel, widget).value = value
    assert panel.estimate is None and panel.figure is None
    assert "bad input" in panel.message.value and field in panel.message.value
    getattr(panel, widget).value = 1
    assert panel.estimate is not None


def test_zero_is_refused_with_a_message_never_replaced():
    from labkit.inter_layer.panel import PipelinePanel

    panel = MemoryPanel()
    panel.seq.value = 0  # the estimate would read 0 as the model's own 4,096
    assert panel.estimate is None and "sequence must be a positive integer (got 0)" in panel.message.value
    pipe = PipelinePanel(pp=16, microbatches=32, dp=8, zero_stage=1)
    pipe.microbatches.value = 0  # the setup would read 0 as m = p
    assert pipe.plan is None and "micro-batches m must be a positive integer (got 0)" in pipe.message.value
    pipe.microbatches.value = 32
    assert pipe.plan is not None and "GiB (2^30 B) per GPU" in pipe.message.value
    assert pipe.figures[1].axes[0].get_ylabel() == "GiB (2^30 bytes)"  # the bars in the text's unit


def test_panel_rejects_unknown_presets_clearly():
    with pytest.raises(LabkitError, match="gpu must be one of"):
        MemoryPanel(gpu="A200")
    with pytest.raises(LabkitError, match="model must be one of"):
        MemoryPanel(model="gpt5")


def test_exercises_accept_the_right_answer_and_hint_otherwise():
    assert checks.check("01.bytes_per_param", 16)
    assert "too low" in str(checks.check("01.bytes_per_param", 12))
    assert checks.check("01.zero_stage", 2)
    assert not checks.check("01.zero_stage", 1)
    gb = 2048 * 12288 * (34 + 5 * 96 * 2048 / 12288) / 1e9
    assert checks.check("01.gpt3_layer_gb", round(gb, 2))
    assert checks.check("01.mtbf_hours", 24 * 54 * 16384 / (419 * 4096))
    assert not checks.check("01.mtbf_hours", 3)
    assert not checks.check("01.mtbf_hours", None)
    assert "must be a number" in str(checks.check("01.mtbf_hours", "lots"))
    assert checks.check("02.bubble", 7 / 39) and not checks.check("02.bubble", 7 / 32)
    assert checks.check("02.zero3_gb", 17.5) and not checks.check("02.zero3_gb", 1120)
    stash = 8 * 2 * 174.6e9 / 8 / 1e9  # 8 versions of an eighth of GPT-3 175B's 16-bit weights
    assert checks.check("02.pipedream_stash_gb", stash) and not checks.check("02.pipedream_stash_gb", stash / 8)
    from labkit.offload import exercises as _offload  # noqa: F401 - registers the 04.* exercises

    assert checks.check("04.offload_gpu_gb", 14) and not checks.check("04.offload_gpu_gb", 14 / 8)
    assert checks.check("03.allreduces", 4) and not checks.check("03.allreduces", 2)
    assert checks.check("03.act_share_2d", 1 / 16) and not checks.check("03.act_share_2d", 1)
    gb = 2048 * 12288 * (34 / 8 + 5 * 96 * 2048 / (12288 * 8)) / 1e9
    assert checks.check("03.gpt3_tp8_sp_gb", gb) and "8x less" in str(checks.check("03.gpt3_tp8_sp_gb", gb))
    with pytest.raises(LabkitError, match="exercise must be one of"):
        checks.check("01.nope", 1)


def test_reveal():
    assert checks.reveal("optimizer", {"parameters": 1, "optimizer": 3})
    assert not checks.reveal(None, {"parameters": 1, "optimizer": 3})
    refused = checks.reveal("weights", {"parameters": 1})
    assert not refused and "prediction must be one of parameters" in str(refused) and "%" not in str(refused)
    claims = checks.reveal_claims({"a": True, "b": None}, {"a": True, "b": False})
    assert not claims and "1 of 2 right" in str(claims) and "b: no (no guess" in str(claims)
    assert "optimizer, 75%" in str(checks.reveal("optimizer", {"parameters": 1, "optimizer": 3}))


def test_reveal_number():
    assert checks.reveal_number(100, 108.6e9, "needed")
    low = checks.reveal_number(24, 108.6e9, "needed again")
    assert not low and str(low) == (
        "Wrong: too low by a factor of 4.52: you said 24 GB. needed again: 108.6 GB (tolerance 10%).")
    assert not checks.reveal_number(None, 1e9, "needed")
    assert "must be a number" in str(checks.reveal_number("lots", 1e9, "needed"))
    assert str(checks.reveal_number(400, 419, "count", "", 1)) == (
        "Wrong: too low by 5%: you said 400. count: 419 (counts are judged exactly).")
    assert checks.reveal_number(0, 0, "steps lost", "", 1) and not checks.reveal_number(1, 0, "steps lost", "", 1)


def test_tables_align():
    out = text_table(["name", "n"], [["a", 1], ["bbb", 22]])
    assert out.splitlines()[0] == "name   n" and out.splitlines()[3] == "bbb   22"
    panel = MemoryPanel()
    assert "RTX" not in estimate_table({"x": panel.estimate}) and "no (" in estimate_table({"x": panel.estimate})


def test_gantt_legend_sits_outside_the_lanes_and_the_title():
    from labkit.sim import replay_schedule, schedule
    from labkit.teach import plots

    order = {r: schedule("1f1b", 4, 8)[r] for r in range(4)}
    tl = replay_schedule(order, 4, {a: 1.0 for acts in order.values() for a in acts})
    fig = plots.gantt(tl, title="a long title that a legend above the axes would overprint, simulated")
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    ax, renderer = fig.axes[0], canvas.get_renderer()
    legend, title, lanes = (x.get_window_extent(renderer) for x in (ax.get_legend(), ax.title, ax))
    assert not legend.overlaps(title) and legend.x0 >= lanes.x1
    assert legend.x1 <= fig.bbox.x1  # and still inside the figure
