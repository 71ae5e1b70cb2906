"""Student copies (outputs cleared, never overwritten) and the answers file an instructor collects."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from labkit.course import copies
from labkit.errors import LabkitError
from labkit.teach import checks

LABS = Path(__file__).resolve().parent.parent / "labs"


def test_copies_clear_outputs_and_never_overwrite(tmp_path):
    made = copies.make_student_copies(LABS, tmp_path)
    assert len(made.created) == len(list(LABS.glob("*.ipynb"))) and not made.kept
    nb = json.loads((tmp_path / "01_storage_challenges.ipynb").read_text())
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert code and all(c["outputs"] == [] and c["execution_count"] is None for c in code)
    solved = json.loads((LABS / "01_storage_challenges.ipynb").read_text())
    assert [c["source"] for c in nb["cells"]] == [c["source"] for c in solved["cells"]]
    assert any(c.get("outputs") for c in solved["cells"])  # labs/ keeps what nbval checks
    mine = tmp_path / "01_storage_challenges.ipynb"
    mine.write_text(mine.read_text().replace("import", "import  ", 1))
    again = copies.make_student_copies(LABS, tmp_path)
    assert not again.created and "01_storage_challenges.ipynb" in again.kept
    assert "import  " in mine.read_text()


def test_bad_source_folder_is_named(tmp_path):
    with pytest.raises(LabkitError, match="src must be a folder"):
        copies.make_student_copies(tmp_path / "nowhere", tmp_path / "out")
    env = os.environ | {"PYTHONPATH": str(LABS.parent)}
    out = subprocess.run([sys.executable, "-m", "labkit.course", "copies", "--src", str(tmp_path), "--dst",
                          str(tmp_path / "o")], capture_output=True, text=True, env=env)  # fmt: skip
    assert out.returncode == 2 and out.stderr.startswith("labkit: error: src must be")


def test_answers_are_exported_with_verdicts(tmp_path):
    checks.reset_attempts()
    checks.check("01.bytes_per_param", 18)
    checks.check("01.bytes_per_param", np.float64(16.0))
    checks.reveal_number(3, 2, "steps lost", "", 1, key="06.predict.rc_lost")
    path = checks.export_answers(tmp_path / "ana.json", student="ana")
    data = json.loads(path.read_text())
    assert data["student"] == "ana" and data["labkit_version"] and data["notebooks"] == ["01", "06"]
    item = data["summary"]["items"]["01.bytes_per_param"]
    assert item["ever_right"] and item["tries"] == 2 and item["first_right_try"] == 2 and item["last_answer"] == 16.0
    assert data["summary"]["items"]["06.predict.rc_lost"]["status"] == "wrong"
    first = data["entries"][0]
    assert first["key"] == "01.bytes_per_param" and not first["ok"] and "DeepSpeed" in first["diagnosis"]
    assert isinstance(data["entries"][1]["answer"], float)  # a number, never "np.float64(16.0)"
    with pytest.raises(LabkitError, match="path must end in .json"):
        checks.export_answers(tmp_path / "a.txt")
    with pytest.raises(LabkitError, match="path must be in an existing folder"):
        checks.export_answers(tmp_path / "nowhere" / "a.json")
