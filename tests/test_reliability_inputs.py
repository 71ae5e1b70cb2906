"""Every bad input is one line naming the field and what is allowed, within 2 s: no hang, no traceback (issue 24).

The CLI cases run ``labkit.cli.main`` in this process (torch already imported) and assert exit
status 2 and a single ``labkit: error:`` line; the API cases assert the LabkitError's text.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import pytest
import torch

from labkit.cli import main
from labkit.errors import LIMITS, LabkitError, divisors, require_divides, require_finite, require_limit

DEADLINE_S = 2.0


@pytest.fixture(scope="module", autouse=True)
def _warm():
    """Load the corpus, torch's lazy modules and the catalogue once: the deadline times the refusal, not an import."""
    from labkit.measure.own_model import build_trainer
    from labkit.teach import checks  # noqa: F401

    build_trainer(None, 2, 32, "fp32", "sdpa", False, None, "cpu")
    main(["estimate", "--params", "7e9"])


CLI = {
    "advise --gpus 1e12": (["advise", "--model", "gpt3-175b", "--gpus", "1e12", "--batch", "8"],
                           "gpus must be at most 2,097,152"),
    "estimate --hidden 1e12 --heads 3": (["estimate", "--layers", "2", "--hidden", "1e12", "--heads", "3", "--seq",
                                          "64", "--vocab", "100"], "hidden must be at most 262,144"),
    "estimate --pp 1e12": (["estimate", "--params", "7e9", "--pp", "1000000000000"], "pp must be at most 2,097,152"),
    "measure --seq 100000": (["measure", "--seq", "100000"], "batch and seq must keep one step under 1e+13 FLOPs"),
    "measure --batch 1e9": (["measure", "--batch", "1e9"], "batch must be at most 67,108,864"),
    "measure --batch 6e7 --seq 1000": (["measure", "--batch", "60000000", "--seq", "1000"],
                                       "batch and seq must fit free memory"),
    "advise --tp 3 --batch 8": (["advise", "--model", "llama2-7b", "--gpus", "8", "--tp", "3", "--batch", "8"],
                                "tp must divide"),
    "estimate --params nan": (["estimate", "--params", "nan"], "params must be a positive integer (got 'nan')"),
    "advise --gpus inf": (["advise", "--model", "gpt2", "--gpus", "inf", "--batch", "8"],
                          "gpus must be a positive integer (got 'inf')"),
}


@pytest.mark.parametrize("case", CLI)
def test_each_bad_command_line_is_one_line_and_exit_2_within_the_deadline(case, capsys):
    argv, message = CLI[case]
    t0 = time.monotonic()
    assert main(argv) == 2
    took = time.monotonic() - t0
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip() and "labkit measure:" not in line]
    assert lines == [lines[0]] and lines[0].startswith("labkit: error: ") and message in lines[0], err
    assert "Traceback" not in err and took < DEADLINE_S, (case, took)


def test_the_stated_limits_and_the_divisors():
    t0 = time.monotonic()
    assert len(divisors(10**12)) == 169 and divisors(36) == [1, 2, 3, 4, 6, 9, 12, 18, 36] and divisors(1) == [1]
    with pytest.raises(LabkitError, match="hidden must divide"):
        require_divides("hidden", 7, "n", 10**12)
    assert time.monotonic() - t0 < DEADLINE_S
    assert require_limit("tp", LIMITS["gpus"]) == LIMITS["gpus"]
    with pytest.raises(LabkitError, match=r"^tp must be at most 2,097,152 \(the lab.s limit for gpus; got 2,097,153"):
        require_limit("tp", LIMITS["gpus"] + 1)
    for bad in (math.nan, math.inf, -math.inf, "1", None, True):
        with pytest.raises(LabkitError, match="x must be a finite number"):
            require_finite("x", bad)


@pytest.mark.parametrize("bad", [math.nan, -1, 0, math.inf, "80e9"])
def test_estimate_memory_refuses_a_device_size_that_is_not_a_finite_positive_number(bad):
    from labkit.predict.estimate import TrainingSetup, estimate_memory
    from labkit.shapes import model_shape

    setup = TrainingSetup(model_shape("gpt2"), micro_batch=1)
    with pytest.raises(LabkitError, match=r"^device_bytes must be a finite number >= 1 \(got "):
        estimate_memory(setup, device_bytes=bad)
    assert estimate_memory(setup, device_bytes=80e9).fits


@pytest.mark.parametrize("bad", [-1, 0, 1.5])
def test_measure_model_refuses_a_warmup_that_is_not_a_positive_integer(bad):
    from labkit.measure import measure_model

    model = torch.nn.Linear(4, 1)
    with pytest.raises(LabkitError, match=r"^warmup must be a positive integer"):
        measure_model(model, (torch.ones(2, 4),), loss=lambda m, b: m(b[0]).sum(), warmup=bad)


def test_measure_model_names_a_batch_the_model_cannot_take():
    from labkit.rig.blocks import find_blocks  # noqa: F401 - the user-model path

    model = torch.nn.Sequential(torch.nn.ModuleList([torch.nn.Linear(4, 4), torch.nn.Linear(4, 4)]))
    model.forward = lambda x: model[0][1](model[0][0](x)).sum()
    from labkit.measure import measure_model

    t0 = time.monotonic()
    with pytest.raises(LabkitError, match=r"^batch must be what the model takes: its first step raised RuntimeError: "
                                          r"mat1 and mat2 shapes cannot be multiplied"):
        measure_model(model, (torch.ones(2, 5),))
    assert time.monotonic() - t0 < DEADLINE_S


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_a_non_finite_answer_is_never_graded_as_a_number(bad):
    from labkit.teach import checks

    fb = checks.check("01.bytes_per_param", bad)
    assert not fb and fb.message.startswith("The answer must be a finite number")


@pytest.mark.parametrize("field,value,message", [("batch", math.inf, "batch (k tokens) must be a positive number"),
                                                 ("batch", math.nan, "batch (k tokens) must be a positive number"),
                                                 ("tokens", math.inf, "tokens (1e9) must be a positive number"),
                                                 ("gpus", 10**12, "GPUs, at least must be a whole number, 0 or")])
def test_the_economics_panel_refuses_non_finite_and_huge_values(field, value, message):
    from labkit.economics.panel import EconomicsPanel

    panel = EconomicsPanel()
    getattr(panel, field).value = value if field != "gpus" else 0
    if field == "gpus":
        panel.gpus.value = value  # an IntText takes what Python gives it
    t0 = time.monotonic()
    with pytest.raises(LabkitError, match=message.replace("(", r"\(").replace(")", r"\)")):
        panel.compute()
    assert time.monotonic() - t0 < DEADLINE_S


def test_course_copies_onto_a_file_or_into_a_folder_that_cannot_be_written(tmp_path, monkeypatch):
    from labkit.course.copies import make_student_copies

    src = tmp_path / "labs"
    src.mkdir()
    (src / "01_x.ipynb").write_text('{"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}')
    blocker = tmp_path / "a file"
    blocker.write_text("x")
    with pytest.raises(LabkitError, match="^dst must be a folder"):
        make_student_copies(src, blocker)
    with pytest.raises(LabkitError, match="^dst must be a folder that can be made"):
        make_student_copies(src, blocker / "below")
    ro = tmp_path / "read-only"
    ro.mkdir()

    def refused(self, *args, **kwargs):  # root ignores a folder's mode: refuse as a read-only mount would
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(Path, "write_text", refused)
    with pytest.raises(LabkitError, match=r"^dst must be a writable folder \(.*read-only.*Permission denied\)$"):
        make_student_copies(src, ro)
    assert list(ro.iterdir()) == []


def _config(tmp_path: Path, name: str, **changes) -> str:
    cfg = json.loads((Path(__file__).parent.parent / "datasets" / "hf_configs" / f"{name}.json").read_text())
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg | changes))  # json writes NaN as NaN, and reads it back as a float nan
    return str(path)


@pytest.mark.parametrize("changes,message", [
    ({"n_embd": 10**9}, "n_embd must be at most 262,144"),
    ({"n_embd": 16384 * 3}, "hf_config must fit free memory: the predicted model states (16 B a parameter) is"),
    ({"resid_pdrop": math.nan}, "config field resid_pdrop must be a probability in [0, 1) (got nan)"),
    ({"attn_pdrop": 1.5}, "config field attn_pdrop must be a probability in [0, 1) (got 1.5)"),
])  # fmt: skip
def test_an_absurd_or_non_finite_config_is_refused_before_anything_is_allocated(tmp_path, capsys, changes, message):
    argv = ["measure", "--hf-config", _config(tmp_path, "gpt2", **changes)]
    t0 = time.monotonic()
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and time.monotonic() - t0 < DEADLINE_S


def test_the_api_refuses_huge_sizes_as_fast_as_the_cli():
    from labkit.advisor.search import advise
    from labkit.shapes import ModelShape

    t0 = time.monotonic()
    with pytest.raises(LabkitError, match=r"^gpus must be at most 2,097,152"):
        advise("gpt3-175b", 1536, gpus=10**12)  # what the advisor panel calls: it hung the kernel
    with pytest.raises(LabkitError, match=r"^global_batch must be at most 67,108,864"):
        advise("gpt3-175b", 10**12, gpus=8)
    with pytest.raises(LabkitError, match=r"^heads must divide hidden=1000000000000: allowed 1, 2, 4, 5, 8"):
        ModelShape(name="x", layers=2, hidden=10**12, heads=3, vocab=100, seq=64)
    assert time.monotonic() - t0 < DEADLINE_S
