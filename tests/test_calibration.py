"""labkit calibrate: a calibration measured on this CPU, valid and finite; a corrupt or foreign file refused."""

import json
import math

import pytest

from labkit.cli import main
from labkit.errors import LabkitError
from labkit.hardware import gpu
from labkit.hardware.calibration import FORMAT, RATES, load, save
from labkit.measure.calibrate import GRID, calibrate
from labkit.shapes.hf_models import small_spec


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    cal = calibrate(small_spec("llama", hidden=128, ffn=256, vocab=512).shape, "cpu", rows=64, seq=64)
    return cal, save(cal, tmp_path_factory.mktemp("cal") / "calibration.json")


def test_the_file_is_valid_and_every_figure_positive_and_finite(measured):
    cal, path = measured
    raw = json.loads(path.read_text())
    assert raw["format"] == FORMAT and raw["machine"] and raw["torch"] and raw["date"]
    back = load(path)
    assert back == cal
    figures = [getattr(back, r) for r in RATES] + list(back.attention_flops.values()) + \
        [s["flops_per_s"] for s in back.gemm_shapes]
    assert len(back.gemm_shapes) == 5 + len(GRID) and set(back.attention_flops) == {"eager", "sdpa"}
    assert all(math.isfinite(x) and x > 0 for x in figures)


def test_the_calibrated_device_gives_back_the_measured_rates(measured):
    cal, _ = measured
    h200 = gpu("h200")
    dev = cal.device(h200)
    assert dev.peak_flops[cal.dtype] * cal.gemm_efficiency == pytest.approx(cal.gemm_flops)
    assert dev.memory_bandwidth * cal.memory_efficiency == pytest.approx(cal.memory_bandwidth)
    assert dev.memory_bytes == h200.memory_bytes and "calibrated" in dev.name
    assert cal.host_device().peak_flops["bf16"] == dev.peak_flops[cal.dtype]


BAD = [("not json {", "is not valid JSON"), ('{"format": "something-else/2"}', "not a labkit calibration file"),
       ("[1, 2]", "not a labkit calibration file")]


@pytest.mark.parametrize("text, message", BAD)
def test_a_corrupt_or_foreign_file_is_refused_in_one_line(tmp_path, capsys, text, message):
    path = tmp_path / "c.json"
    path.write_text(text)
    with pytest.raises(LabkitError, match=message):
        load(path)
    assert main(["measure", "--calibration", str(path)]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


@pytest.mark.parametrize("field, value", [("gemm_flops", -1.0), ("launch_s", float("nan")), ("machine", "")])
def test_a_bad_figure_is_named(measured, tmp_path, field, value):
    raw = json.loads(measured[1].read_text()) | {field: value}
    path = tmp_path / "c.json"
    path.write_text(json.dumps(raw))
    with pytest.raises(LabkitError, match=f"calibration field {field}"):
        load(path)


def test_measure_prints_the_step_time_beside_the_calibrated_prediction(measured, capsys):
    assert main(["measure", "--seq", "16", "--calibration", str(measured[1])]) == 0
    text = capsys.readouterr().out
    assert "step time: measured" in text and "calibrated" in text and "datasheet: none" in text


def test_the_h200_calibration_kept_in_datasets_loads_and_prices_a_step(capsys):
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "datasets" / "measurements" / "h200-calibration-2026-12.json"
    cal = load(path)
    assert cal.device_kind == "cuda" and "H200" in cal.machine and cal.dtype == "bf16"
    argv = ["estimate", "--model", "llama2-7b", "--seq", "4096", "--gpu", "h200", "--calibration", str(path)]
    assert main(argv) == 0
    assert "on the calibration of" in capsys.readouterr().out
