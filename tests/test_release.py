"""The student release holds no answer (issue 37): built once, then grepped for everything the key prints.

One release is built into a temp folder for the module (about 1 s: labkit, datasets and cleared notebooks
copied) and the answer key computed once without its design search (about 10 s, most of it importing every
topic); one subprocess checks that the release cannot print the key. About 15 s in all.
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from labkit.course import similarity
from labkit.course.release import make_release

ROOT = Path(__file__).resolve().parent.parent
INSTRUCTOR = ROOT / "instructor"
TOKEN = re.compile(r"(?<![\w.])-?\d[\d,]*(?:\.\d+)?(?:e[+-]?\d+)?")


@pytest.fixture(scope="module")
def release(tmp_path_factory) -> Path:
    dst = tmp_path_factory.mktemp("release") / "dist"
    make_release(dst)
    return dst


@pytest.fixture(scope="module")
def key_text() -> str:
    from labkit.course.key import answer_key

    return answer_key(designs=False)


def _texts(root: Path) -> dict[str, str]:
    out = {}
    for p in root.rglob("*"):
        if p.is_file() and p.suffix in (".py", ".md", ".ipynb", ".json", ".toml", ".txt", ".csv", ".yml", ""):
            out[str(p.relative_to(root))] = p.read_text(errors="replace")
    return out


def key_figures(text: str) -> dict[str, str]:
    """Item -> the answer the key prints for it: an exercise's figure, a prediction's revealed value."""
    found = {}
    for line in text.splitlines():
        m = re.match(r"- (\d\d\.[\w.]+): (\S+) \(tolerance", line)
        if m:
            found[m[1]] = m[2]
            continue
        m = re.match(r"- (\d\d\.predict\.\w+) \(\w+\): .*: (\S+)$", line)
        if m and m[2] != "rebuild":
            found[m[1]] = m[2]
    return found


def _significant(token: str) -> int:
    return len(token.replace(",", "").replace("-", "").split("e")[0].replace(".", "").lstrip("0"))


def test_the_release_leaves_out_the_key_its_printer_and_the_instructors_files(release):
    files = {str(p.relative_to(release)) for p in release.rglob("*") if p.is_file()}
    assert "labkit/teach/journal.py" in files and "datasets/hardware.toml" in files  # what a student runs
    assert "labkit/practice/build/harness.py" in files  # the build-it judge stays: it checks the student's module
    for gone in ("labkit/course/key.py", "labkit/course/design_key.py", "labkit/course/collect.py",
                 "labkit/course/regrade.py", "labkit/course/regrade_code.py", "labkit/course/gradebook.py"):
        assert gone not in files
    assert not any(f.startswith(("instructor", "tests", "labkit/course/sandbox")) for f in files)
    assert not any(Path(f).name in ("hidden.json", "predictions.json", "key.py") for f in files)
    assert "find_solution" not in (release / "labkit" / "practice" / "design.py").read_text()  # no design search
    readme = (release / "README.md").read_text()
    make = (release / "Makefile").read_text()
    for pointer in ("instructor/", "make instructor", "make test", "key.py"):
        assert pointer not in readme and pointer not in make
    assert "make lab" in readme and "\nlab:" in make and "\ntest:" not in make


def test_the_release_cannot_print_the_key(release):
    env = os.environ | {"PYTHONPATH": str(release)}
    for args in (["key"], ["collect", str(release)]):
        out = subprocess.run([sys.executable, "-m", "labkit.course", *args], capture_output=True, text=True,
                             env=env, cwd=release, timeout=120)
        assert out.returncode == 2 and "a student release leaves it out" in out.stderr, out.stderr
        assert len(out.stderr.splitlines()) == 1 and "tolerance" not in out.stdout
    made = subprocess.run([sys.executable, "-m", "labkit.course", "update", "--src", str(release / "labs"), "--dst",
                           str(release / "my-labs")], capture_output=True, text=True, env=env, cwd=release,
                          timeout=120)  # what the release's `make lab` runs: it works without the instructor's tools
    assert made.returncode == 0 and "10 new" in made.stdout, made.stderr


KNOWN = {"05.fp16_max": "fp16's largest finite value: a constant of the format, which labkit.reduction.precision "
                        "documents"}


def _judge_file(item: str) -> str:
    """The release path of the module whose code judges ``item`` (its answer and the why shown after a right try)."""
    import inspect

    from labkit.course.regrade import exercises

    ex = exercises().get(item)
    source = inspect.getsourcefile(ex.answer) if ex is not None else None
    return str(Path(source).resolve().relative_to(ROOT)) if source else ""


def test_no_file_of_the_release_holds_a_figure_the_key_prints(release, key_text):
    """A figure the key prints (to 4 significant digits or more: 16 or 0.25 is every table's) is in no file of
    the release but the module that judges it: a check needs its own answer, nothing else does."""
    figures = key_figures(key_text)
    assert len(figures) > 60 and "01.bytes_per_param" in figures  # the parse is not vacuous
    texts = _texts(release)
    hits = []
    for item, fig in figures.items():
        if _significant(fig) < 4 or not TOKEN.fullmatch(fig) or item in KNOWN:
            continue
        hits += [f"{item} = {fig} in {name}" for name, text in texts.items()
                 if fig in TOKEN.findall(text) and name != _judge_file(item)]  # fmt: skip
    assert not hits, hits
    assert not any("labkit answer key" in t for t in texts.values())
    solved = (INSTRUCTOR / "predictions.json").read_text()  # the scan is not vacuous: the checkout's answers hold them
    assert sum(fig in TOKEN.findall(solved) for item, fig in figures.items() if ".predict." in item) > 5


def _reference_functions() -> dict[str, str]:
    text = (INSTRUCTOR / "key.py").read_text()
    return {n.name: ast.get_source_segment(text, n) or "" for n in ast.parse(text).body
            if isinstance(n, ast.FunctionDef)}  # fmt: skip


def _parts(text: str) -> list[similarity.Normal]:
    """The normal forms of a module, its functions and classes, and their methods (of 40 nodes or more:
    smaller ones are idioms, ``rank, world = dist.get_rank(), dist.get_world_size()``)."""
    def defs(tree: ast.Module) -> list[ast.AST]:
        return [n for n in tree.body if isinstance(n, ast.FunctionDef | ast.ClassDef)]

    def methods(tree: ast.Module) -> list[ast.AST]:
        return [m for n in defs(tree) if isinstance(n, ast.ClassDef) for m in n.body if isinstance(m, ast.FunctionDef)]

    parts = [similarity.normal_tree(ast.parse(text))]  # each normal form changes its tree: a fresh parse each,
    parts += [similarity.normal_tree(n) for n in defs(ast.parse(text))]  # whose parts do not overlap
    parts += [similarity.normal_tree(n) for n in methods(ast.parse(text))]
    return [n for n in parts if n.nodes >= 40]


def test_no_file_of_the_release_holds_a_reference_solution(release):
    """The key's functions and the build-it reference modules (and their functions, classes and methods) are
    in no file of the release, renamed or reformatted: nothing in it has the normal form of one. Nor are the
    hidden cases."""
    wanted = {n.dump for s in _reference_functions().values() for n in _parts(s)}
    wanted |= {n.dump for p in (INSTRUCTOR / "build").glob("*.py") for n in _parts(p.read_text())}
    texts = _texts(release)
    found = [name for name, text in texts.items() if name.endswith(".py")
             for n in _parts(text) if n.dump in wanted]
    hidden = json.dumps(json.loads((INSTRUCTOR / "build" / "hidden.json").read_text()))
    found += [name for name, text in texts.items() if hidden[:120] in text]
    assert not found, found
    mine = _parts(_reference_functions()["states_per_gpu"].replace("weights", "w"))
    assert mine and mine[0].dump in wanted  # the comparison is not vacuous: a renamed copy is found
