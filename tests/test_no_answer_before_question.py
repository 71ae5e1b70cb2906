"""No answer before its question: a prediction's answer never appears in the notebook source above where it is asked.

Each prediction is committed in a cell ``predicted_... = None``; the phrases below are the ways a
sentence or a printed line would give its answer away (the issue's review found each of the
first ones in a notebook). The scan reads every line above the commit cell, prose and code, with the comment marks, line
breaks and emphasis taken out, so a phrase split over two lines is still found.
"""

import ast
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))
from build_notebooks import parse  # noqa: E402

SOURCES = Path(__file__).resolve().parent.parent / "tools" / "notebooks"

ANSWERS: dict[tuple[str, str], tuple[str, ...]] = {
    ("01", "predicted_interruptions"): ("419",),
    ("02", "predicted_extra_traffic"): ("1.5x the", "1.5 times"),
    ("02", "predicted_gpipe_peak"): ("all m micro-batches are in flight", "holds all m micro-batches"),
    ("02", "predicted_1f1b_peak"): ("at most p micro-batches", "at most p - rank", "p micro-batches are in flight",
                                    "p micro-batches in flight"),
    ("02", "predicted_versions_stage0"): ("keeps p versions", "stashes p versions", "p weight versions"),
    ("04", "predicted_repeats"): ("the same every iteration", "the pattern repeats", "repeats every iteration"),
    ("04", "predicted_bytes_per_param"): ("4 bytes per parameter per step", "2 bytes each way"),
    ("06", "predicted_per_day_16k"): ("419 unexpected", "one every three hours", "every 3 hours", "a day on 16,384"),
    ("06", "predicted_per_day_100k"): ("a day on 100,000",),
}


def _source(notebook: str) -> list[str]:
    (path,) = SOURCES.glob(f"{notebook}_*.py")
    return path.read_text().splitlines()


def phrases_above(lines: list[str], variable: str, phrases: tuple[str, ...]) -> list[str]:
    """The phrases that occur above the line committing ``variable`` (prose and code, marks taken out)."""
    asked = next((i for i, line in enumerate(lines) if line.startswith(f"{variable} = None")), None)
    assert asked is not None, f"no cell commits {variable}"
    above = " ".join(line.lstrip("#").strip() for line in lines[:asked]).replace("*", "").lower()
    return [p for p in phrases if p.lower() in above]


@pytest.mark.parametrize("notebook, variable", sorted(ANSWERS))
def test_the_answer_is_not_above_the_question(notebook, variable):
    found = phrases_above(_source(notebook), variable, ANSWERS[(notebook, variable)])
    assert not found, f"{notebook}: {found[0]!r} appears above the prediction {variable}"


def test_the_scan_finds_an_answer_where_there_is_one():
    """The scan is not vacuous: a phrase above the commit (split over lines, emphasised) is found; below, not."""
    source = ["# Llama 3 saw **419", "# unexpected** interruptions.", "predicted_x = None", "# 419 unexpected again"]
    assert phrases_above(source, "predicted_x", ("419 unexpected",)) == ["419 unexpected"]
    assert phrases_above(source[2:], "predicted_x", ("419 unexpected",)) == []


def _shows(node: ast.stmt) -> bool:
    """Whether a statement puts something on screen: a bare expression (a call, a panel), or a print anywhere in it."""
    if isinstance(node, ast.Expr) and not isinstance(node.value, ast.Constant):
        return True
    return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in ("print", "display")
               for n in ast.walk(node))


def _reveals(node: ast.stmt) -> bool:
    return any(isinstance(n, ast.Attribute) and n.attr.startswith("reveal") for n in ast.walk(node))


def shown_before_reveal(code: str) -> list[str]:
    """The statements of one code cell that show output above the cell's first reveal (none when it has none).

    Run All with no guess runs the reveal cell whole: anything it prints above the refusal is the
    answer on screen before the question is judged, so the measurement belongs in the cell below.
    """
    tree = ast.parse("\n".join(line for line in code.splitlines() if not line.lstrip().startswith(("%", "!"))))
    first = next((i for i, node in enumerate(tree.body) if _reveals(node)), None)
    if first is None:
        return []
    return [ast.unparse(node).splitlines()[0] for node in tree.body[:first] if _shows(node)]


def _reveal_cells(notebook: Path) -> list[tuple[int, str]]:
    nb = parse(notebook.read_text(), notebook.stem)
    return [(i, c.source) for i, c in enumerate(nb.cells) if c.cell_type == "code" and "reveal" in c.source]


@pytest.mark.parametrize("notebook", sorted(SOURCES.glob("0*.py")), ids=lambda p: p.name[:2])
def test_no_reveal_cell_prints_above_its_reveal(notebook):
    bad = [f"cell {i}: {line}" for i, code in _reveal_cells(notebook) for line in shown_before_reveal(code)]
    assert not bad, f"{notebook.name}: printed above the reveal in its own cell (move it to the cell below): {bad}"


def test_the_cell_scan_catches_a_print_above_the_reveal():
    """The check can fail: a table printed (directly or in a loop) or a bare expression above the reveal is caught."""
    leaky = "m = f()\nfor k in m:\n    print(k)\nprint(checks.reveal_number(g, m, 'x', key='k'))\nprint(m)\n"
    assert shown_before_reveal(leaky) == ["for k in m:"]
    assert shown_before_reveal("table\nchecks.reveal(p, m, key='k')") == ["table"]
    assert shown_before_reveal("m = f()\nassert m\nprint(checks.reveal(p, m, key='k'))\nprint(m)") == []
