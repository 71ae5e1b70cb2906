"""No free credit (issue 37): every student copy run untouched, exported and collected scores zero on every item.

Running all ten notebooks would take most of a quarter-hour, so the test runs, from each student copy (each
notebook as ``tools/build_notebooks.py`` makes it from its source, cleared as ``copies`` clears
``labs/*.ipynb``: the same cells before and after the notebooks are rebuilt), exactly the cells a student
answers in, as they stand: the guesses (``predicted_... = None``), the self-checks, the reasoning exercises,
the coding stubs, the build-it stubs and the capstone, executed as written. Each reveal is called as its cell
calls it, with the guess its cell passes, on a stand-in measurement: an untouched guess is refused whatever
was measured, so the journal holds what Run All writes. The journal is exported and collected (sandbox
re-runs included, none needed): every count is zero but "no guess", which is every registered prediction.
About 10 s. Before issue 37, 09's capstone cell came filled in and this scored ``capstone_met=1``.
"""

from __future__ import annotations

import ast
import json
import os
import sys
from pathlib import Path

import nbformat
import pytest

from labkit.course import copies
from labkit.course.collect import collect
from labkit.course.gradebook import TOTALS
from labkit.teach import checks, journal
from labkit.teach.predictions import PREDICTIONS

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
from build_notebooks import parse  # noqa: E402

SOURCES = ROOT / "tools" / "notebooks"
ANSWERING = {"check", "check_code", "open_stub", "check_build", "grade", "print"}  # what an answer cell calls
REVEALS = {"reveal": {"a": 2.0, "b": 1.0}, "reveal_number": 1.0, "reveal_claims": None}


def _code(cell: dict) -> ast.Module | None:
    if cell["cell_type"] != "code":
        return None
    return ast.parse("\n".join(ln for ln in "".join(cell["source"]).splitlines()
                               if not ln.lstrip().startswith(("%", "!"))))  # fmt: skip


def _calls(tree: ast.AST) -> set[str]:
    return {n.func.attr if isinstance(n.func, ast.Attribute) else getattr(n.func, "id", "")
            for n in ast.walk(tree) if isinstance(n, ast.Call)}  # fmt: skip


def free_names(tree: ast.Module) -> set[str]:
    """The names a cell reads that it neither imports, defines nor binds (function bodies left out)."""
    import builtins

    bound, read = set(dir(builtins)), set()
    for node in tree.body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            bound |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, ast.FunctionDef):
            bound.add(node.name)
        else:
            read |= {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
            bound |= {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    return read - bound


def answer_cell(tree: ast.Module, known: set[str] = frozenset({"checks", "capstone"})) -> bool:
    """A cell a student answers in: it calls only answering functions (or nothing), sets only literals, and
    reads no name but those the answer cells above it set (``known``): no measurement."""
    if free_names(tree) - set(known):
        return False
    for node in tree.body:
        if isinstance(node, ast.Import | ast.ImportFrom | ast.FunctionDef):
            continue
        if isinstance(node, ast.Assign) and not _calls(node.value):
            try:
                ast.literal_eval(node.value)
            except ValueError:
                return False
            continue
        if not (isinstance(node, ast.Expr | ast.Assign) and _calls(node) and _calls(node) <= ANSWERING):
            return False
    return bool(tree.body)


def run_untouched(notebook: dict, where: Path) -> list[str]:
    """Run a student copy's answer cells and its reveals' guesses as the copy holds them; the cells run."""
    from labkit.advisor import capstone
    from labkit.course.regrade import exercises

    exercises()  # what each notebook's first cell does: import its topic's exercises, which registers them
    ns: dict = {"checks": checks}

    ns["capstone"] = capstone
    ran = []
    cwd = os.getcwd()
    os.chdir(where)
    try:
        for i, cell in enumerate(notebook["cells"]):
            tree = _code(cell)
            if tree is None:
                continue
            if answer_cell(tree, set(ns)):
                exec(compile(tree, f"<cell {i}>", "exec"), ns)  # noqa: S102 - the lab's own cells
                ran.append(f"{i}")
            for call in ast.walk(tree):
                if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr in REVEALS:
                    key = next(k.value.value for k in call.keywords if k.arg == "key")
                    guess = eval(compile(ast.Expression(call.args[0]), "<guess>", "eval"), ns)  # noqa: S307
                    truth = REVEALS[call.func.attr]
                    if call.func.attr == "reveal_claims":
                        truth = {k: True for k in guess}
                    getattr(checks, call.func.attr)(guess, truth, *(["x"] if truth == 1.0 else []), key=key)
    finally:
        os.chdir(cwd)
    return ran


def test_the_answer_cell_scan_takes_only_answer_cells():
    assert answer_cell(ast.parse("checks.check('06.young_minutes', None)"))
    assert answer_cell(ast.parse("my_plan = None\npredicted_x = {'a': None}"))
    assert not answer_cell(ast.parse("results = zero.run_strategies(world_size=2)"))
    assert not answer_cell(ast.parse("my_plan = {'dp': 8}\ncapstone.grade(my_plan)\nplots.bars(x)"))
    assert not answer_cell(ast.parse("print(f'{share:.2f}')"))  # a measurement printed: not an answer cell


def test_an_untouched_copy_of_every_notebook_scores_zero(tmp_path, monkeypatch):
    monkeypatch.setenv(journal.ENV, str(tmp_path / "student" / journal.FILENAME))
    (tmp_path / "student").mkdir()
    ran = {}
    for path in sorted(SOURCES.glob("0*.py")):
        built = json.loads(nbformat.writes(parse(path.read_text(), path.stem)))
        copy = copies.cleared(built, path.name)
        ran[path.name[:2]] = run_untouched(copy, tmp_path / "student")
    assert all(ran[nb] for nb in ran if nb != "00"), ran  # every notebook has answer cells, and they ran
    (tmp_path / "class").mkdir()
    checks.export_answers(tmp_path / "class" / "untouched.json", student="untouched")
    (row,) = collect(tmp_path / "class")
    scores = {k: row[k] for k in TOTALS if k not in ("predictions_registered", "predictions_no_guess")}
    assert scores == dict.fromkeys(scores, 0), scores
    assert row["predictions_no_guess"] == row["predictions_registered"] == len(PREDICTIONS)
    assert row["flag_codes"] == "", row["flags"]


@pytest.mark.parametrize("plan, met", [("None", 0), ('{"dp": 8, "tp": 8, "pp": 16, "micro_batch": 1, '
                                                      '"recompute": "full"}', 1)])
def test_the_scan_credits_a_filled_in_capstone(tmp_path, monkeypatch, plan, met):
    """The test can fail: 09's capstone as it came (Megatron-LM's plan filled in) is credited when collected."""
    monkeypatch.setenv(journal.ENV, str(tmp_path / journal.FILENAME))
    nb = {"cells": [{"cell_type": "code", "source": f"my_plan = {plan}"},
                    {"cell_type": "code", "source": "capstone.grade(my_plan) if my_plan is not None else print('no')"}]}
    run_untouched(nb, tmp_path)
    (tmp_path / "class").mkdir()
    checks.export_answers(tmp_path / "class" / "s.json", student="s", notebook="09")
    (row,) = collect(tmp_path / "class", rerun_code=False)
    assert row["capstone_met"] == met
