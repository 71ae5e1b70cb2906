"""Every notebook source is well formed: its prose renders, and it checks measured against model."""

import ast
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
from build_notebooks import parse  # noqa: E402

SOURCES = sorted((ROOT / "tools" / "notebooks").glob("*.py"))
HEADING_IN_CODE = re.compile(r"^\s*#+\s*#{1,6}\s+\S")  # "# ## Break it" left in a code cell


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.stem)
def test_no_markdown_heading_inside_a_code_cell(source):
    nb = parse(source.read_text())
    bad = [(i, line) for i, cell in enumerate(nb.cells) if cell.cell_type == "code"
           for line in cell.source.splitlines() if HEADING_IN_CODE.match(line)]  # fmt: skip
    assert not bad, f"{source.name}: markdown heading in code cell (missing '# %% [markdown]'?): {bad}"


@pytest.mark.parametrize("source", [s for s in SOURCES if not s.stem.startswith("00_")], ids=lambda p: p.stem)
def test_every_notebook_asserts_measured_against_model(source):  # 00 is the course guide: it measures nothing
    nb = parse(source.read_text())
    asserts = [cell.source for cell in nb.cells if cell.cell_type == "code" and re.search(r"^assert\b", cell.source,
                                                                                           re.MULTILINE)]
    assert asserts, f"{source.name} has no assert of measured against model"


def test_parse_catches_a_heading_left_in_code():
    nb = parse("# %%\nx = 1\n# ## Break it\n# %% [markdown]\n# ## Fine\n")
    assert HEADING_IN_CODE.match(nb.cells[0].source.splitlines()[1])
    assert nb.cells[1].cell_type == "markdown"


def _is_stub(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """A learner's exercise stub: a docstring at most, then ``raise NotImplementedError``."""
    body = [b for b in node.body if not (isinstance(b, ast.Expr) and isinstance(b.value, ast.Constant))]
    return len(body) == 1 and isinstance(body[0], ast.Raise) and body[0].exc is not None \
        and "NotImplementedError" in ast.unparse(body[0].exc)


def definitions(code: str) -> list[str]:
    """Functions, classes and lambdas bound to a name in one code cell, exercise stubs left out.

    Lines of IPython magics (``%time``, ``!ls``) are skipped; a lambda passed as an argument is not a
    definition (``key=lambda r: r.peak``), one assigned to a name is.
    """
    tree = ast.parse("\n".join(line for line in code.splitlines() if not line.lstrip().startswith(("%", "!"))))
    found = []
    for n in ast.walk(tree):
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and not _is_stub(n):
            found.append(f"def {n.name}")
        elif isinstance(n, ast.ClassDef):
            found.append(f"class {n.name}")
        elif isinstance(n, (ast.Assign, ast.AnnAssign, ast.NamedExpr)) and isinstance(n.value, ast.Lambda):
            found.append(f"lambda at line {n.lineno}")
    return found


def test_the_definition_check_tells_stubs_from_logic():
    stub = 'def f(x):\n    """Your turn."""\n    raise NotImplementedError  # your code here\n'
    assert definitions(stub) == []
    assert definitions("def f(x):\n    return 2 * x\n") == ["def f"]
    assert definitions("class Plan:\n    pass\n") == ["class Plan"]
    assert definitions("f = lambda x: x\nsorted(xs, key=lambda r: r.peak)\n%time f(1)\n") == ["lambda at line 1"]
    assert definitions("def f(x):\n    if x:\n        raise NotImplementedError\n    return x\n") == ["def f"]


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.stem)
def test_no_notebook_cell_defines_a_function_or_class(source):
    nb = parse(source.read_text())
    bad = [(i, d) for i, cell in enumerate(nb.cells) if cell.cell_type == "code" for d in definitions(cell.source)]
    assert not bad, f"{source.name}: cells define logic (move it into labkit): {bad}"
