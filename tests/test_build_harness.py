"""The build-it harness without processes: stubs copied once, modules loaded by path, bad input named."""

from __future__ import annotations

import pytest

from labkit.errors import LabkitError
from labkit.practice import CODING, build
from labkit.practice.build import harness


def test_every_build_exercise_is_also_a_coding_exercise_with_a_stub():
    assert {"02.build.zero1", "02.build.onef1b"} <= set(build.BUILDS)
    for key, ex in build.BUILDS.items():
        assert key in CODING and (harness.STUBS / ex.stub).is_file()


def test_bad_input_names_the_field(tmp_path):
    with pytest.raises(LabkitError, match="build exercise"):
        build.open_stub("02.build.nope", tmp_path)
    with pytest.raises(LabkitError, match="folder must be"):
        build.open_stub("02.build.zero1", tmp_path / "missing")
    with pytest.raises(LabkitError, match="path must be"):
        build.check_build("02.build.zero1", tmp_path / "nothing.py")
    with pytest.raises(LabkitError, match="path must be"):
        build.load_module(tmp_path / "notes.txt")


def test_load_module_sees_each_edit(tmp_path):
    path = tmp_path / "m.py"
    path.write_text("X = 1\n")
    assert build.load_module(path).X == 1
    path.write_text("X = 2\n")
    assert build.load_module(path).X == 2


def test_a_copy_is_recognised_whatever_its_docstrings_and_comments():
    a = '"""doc"""\ndef f(x):\n    """say"""\n    return x + 1  # one\n'
    b = "def f(x):\n\n    return x + 1\n"
    assert harness.normal_source(a) == harness.normal_source(b)
    assert harness.normal_source(a) != harness.normal_source(b.replace("+ 1", "+ 2"))
    stub = (harness.STUBS / "zero1.py").read_text()
    assert harness.is_blank("02.build.zero1", stub + "\n# thinking\n")
    assert not harness.is_blank("02.build.zero1", stub.replace('raise NotImplementedError("shard_bounds")', "pass"))
