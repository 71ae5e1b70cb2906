"""Every notebook source is well formed: its prose renders, and it checks measured against model."""

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
