"""No answer before the guess (issue 37): no cell above a prediction's reveal shows what the reveal judges.

Two scans, each over every notebook, both cheap (about a second in all: sources parsed, stored outputs read):

* **the sources' data flow**: the value a reveal judges (its ``actual``/``measured``/``truths`` argument)
  is traced back through the assignments of its own cell and of the cells above it; a cell above the
  reveal that prints or displays any of those values (a table of the runs the guess is about, a line
  of them) shows the answer before the guess is judged. 02 printed its ZeRO table (``comm volume
  88,704`` against ``59,136``, the traffic ratio asked for) two cells above the reveal;
* **the stored outputs** (``labs/*.ipynb``, what Run All shows a student with no guess) against the
  values the reveals judged when the notebooks were built (``instructor/predictions.json``): a number
  that prints the answer to four significant figures or more, above its reveal, is the answer on screen.

Four figures, because three collide by chance in a long table (05's compression ratios print a 2.01
beside nothing to do with 8-bit AdamW's 2.005 bytes per parameter); a value too round to be evidence
(0.25, 1.5, 8) or printed to fewer figures is left to the first scan.
"""

from __future__ import annotations

import ast
import json
import math
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
from build_notebooks import parse  # noqa: E402

SOURCES = ROOT / "tools" / "notebooks"
LABS = ROOT / "labs"
ANSWERS = ROOT / "instructor" / "predictions.json"
REVEALS = {"reveal": "measured", "reveal_number": "actual", "reveal_claims": "truths"}  # the judged argument
FIGURES = 4  # significant figures a printed number needs to count as the answer (see the docstring)
NUMBER = re.compile(r"(?<![\w.])-?\d[\d,]*(?:\.\d+)?(?:e[+-]?\d+)?")


def _tree(code: str) -> ast.Module:
    return ast.parse("\n".join(line for line in code.splitlines() if not line.lstrip().startswith(("%", "!"))))


def _loads(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def _traced(node: ast.AST, in_call: bool = False) -> set[str]:
    """The names a judged value is made of: every name, except one passed whole to a call, or one of its
    attributes (``measure_step(trainer)``, ``TrainConfig(model=config.model)``: inputs; the value is measured
    there); an item taken out of one stays, wherever it is (``zero.volume(results["zero3"][0].steady)``: the
    value is read out of ``results``), and so does a method's owner (``llama.failures_per_day(16_384)``)."""
    if isinstance(node, ast.Name):
        return set() if in_call else {node.id}
    if isinstance(node, ast.Subscript):
        return _traced(node.value) | _traced(node.slice, True)
    if isinstance(node, ast.Attribute):
        return _traced(node.value, in_call)
    if isinstance(node, ast.Call):
        found = _traced(node.func)
        for arg in [*node.args, *(k.value for k in node.keywords)]:
            found |= _traced(arg, True)
        return found
    found: set[str] = set()
    for child in ast.iter_child_nodes(node):
        found |= _traced(child, in_call)
    return found


def _stores(node: ast.stmt) -> tuple[set[str], ast.AST | None]:
    """The names a statement binds and the expression it binds them from (None when it binds none)."""
    if isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign) and node.value is not None:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        names = {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
        return names, node.value
    if isinstance(node, ast.For | ast.With):
        bound = [node.target] if isinstance(node, ast.For) else [i.optional_vars for i in node.items if i.optional_vars]
        return {n.id for t in bound for n in ast.walk(t) if isinstance(n, ast.Name)}, node
    return set(), None


def _reveal_calls(node: ast.AST) -> list[tuple[str, ast.expr]]:
    """(key, the judged expression) of every keyed reveal call under ``node``."""
    out = []
    for call in ast.walk(node):
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr in REVEALS):
            continue
        key = next((k.value.value for k in call.keywords if k.arg == "key" and isinstance(k.value, ast.Constant)),
                   None)
        judged = next((k.value for k in call.keywords if k.arg == REVEALS[call.func.attr]), None)
        judged = judged if judged is not None else (call.args[1] if len(call.args) > 1 else None)
        if isinstance(key, str) and judged is not None:
            out.append((key, judged))
    return out


def _shows(node: ast.stmt) -> bool:
    """Whether a statement puts something on screen: a bare expression, or a print/display anywhere in it."""
    if isinstance(node, ast.Expr) and not isinstance(node.value, ast.Constant):
        return True
    return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in ("print", "display")
               for n in ast.walk(node))


def judged_data(cells: list[list[ast.stmt]], where: int, stmt: int, judged: ast.expr) -> set[str]:
    """The names, bound above the reveal (cell ``where``, statement ``stmt``), that the judged value comes from."""
    wanted, found = _traced(judged), set()
    order = [(c, s) for c in range(where + 1) for s in range(len(cells[c])) if (c, s) < (where, stmt)]
    for c, s in reversed(order):
        names, value = _stores(cells[c][s])
        hit = names & wanted
        if hit:
            found |= hit
            wanted |= _traced(value)
    return found


def leaks(source: str, name: str = "nb") -> list[str]:
    """Every statement above a reveal that shows a value the reveal judges: 'key: cell N shows `line`'."""
    nb = parse(source, name)
    cells = [_tree(c.source).body if c.cell_type == "code" else [] for c in nb.cells]
    out = []
    for where, body in enumerate(cells):
        for stmt, node in enumerate(body):
            for key, judged in _reveal_calls(node):
                data = judged_data(cells, where, stmt, judged)
                for c in range(where + 1):
                    for shown in cells[c][: stmt if c == where else None]:
                        if _shows(shown) and _loads(shown) & data and not _reveal_calls(shown):
                            out.append(f"{key}: cell {c} shows `{ast.unparse(shown).splitlines()[0]}` "
                                       f"({', '.join(sorted(_loads(shown) & data))})")
    return out


OWED: dict[str, str] = {}  # notebook -> why it still shows an answer early (none now)


@pytest.mark.parametrize("source", [pytest.param(p, marks=pytest.mark.xfail(strict=True, reason=OWED[p.name[:2]]))
                                    if p.name[:2] in OWED else p for p in sorted(SOURCES.glob("0*.py"))],
                         ids=lambda p: p.name[:2])
def test_no_cell_above_a_reveal_shows_what_it_judges(source):
    found = leaks(source.read_text(), source.stem)
    assert not found, f"{source.name}: shown before its reveal (print it in or below the reveal's cell): {found}"


def test_the_flow_scan_catches_a_table_printed_above_the_reveal():
    """02 as it was: the runs printed as a table two cells above the reveal of a ratio computed from them."""
    leaky = ("# %%\nresults = run()\nprint(f'Psi = {results[0].params}')\nprint(table(results))\n"
             "# %%\nextra = volume(results[1]) / volume(results[0])\n"
             "print(checks.reveal_number(g, extra, 'x', key='02.predict.zero3_traffic'))\n"
             "# %%\nprint(table(results))\n")
    found = leaks(leaky)
    assert len(found) == 2 and all(f.startswith("02.predict.zero3_traffic: cell 0 shows") for f in found), found
    fixed = ("# %%\nresults = run()\nextra = volume(results[1]) / volume(results[0])\n"
             "print(checks.reveal_number(g, extra, 'x', key='k'))\n# %%\nprint(table(results))\n")
    assert leaks(fixed) == []
    independent = "# %%\nother = run()\nprint(other)\n# %%\nm = f()\nprint(checks.reveal(p, m, key='k'))\n"
    assert leaks(independent) == []  # a table of something the reveal does not judge is no leak


def _text(cell: dict) -> str:
    parts = []
    for o in cell.get("outputs", []):
        if o.get("output_type") == "stream":
            parts.append("".join(o.get("text", "")))
        elif "text/plain" in o.get("data", {}):
            parts.append("".join(o["data"]["text/plain"]))
    return "\n".join(parts)


def _significant(token: str) -> int:
    digits = token.replace(",", "").replace("-", "").split("e")[0].replace(".", "").lstrip("0")
    return len(digits)


def prints_value(text: str, value: float) -> list[str]:
    """Numbers in ``text`` that print ``value`` (or 100 x a fraction: a share as a percent) to 4 or more
    significant figures, rounded as printed; none when the value is too round to tell from other figures."""
    if not math.isfinite(value) or value == 0 or _significant(f"{abs(value):.4g}") < FIGURES:
        return []
    hits = []
    for token in NUMBER.findall(text):
        if _significant(token) < FIGURES:
            continue
        x = float(token.replace(",", ""))
        places = len(token.split(".")[1].split("e")[0]) if "." in token and "e" not in token else 0
        half = 0.5 * 10.0 ** -places if "e" not in token else 0.005 * abs(x)
        if any(abs(x - v) <= half + 1e-12 for v in (value, *((100 * value,) if abs(value) < 1 else ()))):
            hits.append(token)
    return hits


def _stored() -> list[tuple[str, Path]]:
    return [(p.name[:2], p) for p in sorted(LABS.glob("0*.ipynb"))]


@pytest.mark.parametrize("notebook, path", _stored(), ids=lambda x: x if isinstance(x, str) else "")
def test_no_stored_output_above_a_reveal_prints_its_answer(notebook, path):
    answers = json.loads(ANSWERS.read_text()) if ANSWERS.is_file() else {}
    cells = json.loads(path.read_text())["cells"]
    found = []
    for where, cell in enumerate(cells):
        if cell["cell_type"] != "code":
            continue
        for key, _ in _reveal_calls(_tree("".join(cell["source"]))):
            value = answers.get(key)
            if not isinstance(value, int | float) or isinstance(value, bool):
                continue
            for above, c in enumerate(cells[:where]):
                found += [f"{key} = {value:.4g}: cell {above} prints {t}" for t in prints_value(_text(c), value)]
    assert not found, f"{path.name}: the answer printed above its reveal: {found}"


def test_the_output_scan_finds_a_printed_answer_and_ignores_round_ones():
    assert prints_value("100,000 GPUs:  47.36 failures a day", 47.358760) == ["47.36"]
    assert prints_value("share 37.82% of the layer", 0.378238) == ["37.82"]  # a fraction as a percent
    assert prints_value("47.35, 47.4, 4736 and 2.01", 47.358760) == []  # another rounding, 3 figures, not x100
    assert prints_value("8-bit ratio 2.01 in a table", 2.0052881) == []  # 3 figures: chance, not evidence
    assert prints_value("p=4 m=8: 8.000, 8.000", 8.0) == []  # too round to be evidence: the flow scan's job
