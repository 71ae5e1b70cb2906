"""Build labs/*.ipynb from their percent-format sources in tools/notebooks/, and execute them.

The .py source is what people edit and review; the .ipynb with its stored outputs is
what learners open and what strict nbval checks. Cells start with ``# %%`` (code) or
``# %% [markdown]``; ``# %% tags=["nbval-ignore-output"]`` tags a code cell.

    python tools/build_notebooks.py            # build and execute every notebook
    python tools/build_notebooks.py 01         # only those whose name contains "01"
    python tools/build_notebooks.py 01 --out /tmp/try   # a trial run: write there, leave labs/ alone
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ROOT / "tools" / "notebooks"
LABS = ROOT / "labs"
HEADER = re.compile(r"^# %%(?P<md> \[markdown\])?(?: tags=(?P<tags>\[.*\]))?\s*$")


def parse(text: str) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    cells: list[tuple[bool, list[str], list[str]]] = []
    for line in text.splitlines():
        m = HEADER.match(line)
        if m:
            cells.append((bool(m["md"]), json.loads(m["tags"]) if m["tags"] else [], []))
        elif cells:
            cells[-1][2].append(line)
    for is_md, tags, lines in cells:
        body = "\n".join(lines).strip("\n")
        if is_md:
            body = "\n".join(line[2:] if line.startswith("# ") else line.lstrip("#") for line in body.splitlines())
            nb.cells.append(nbformat.v4.new_markdown_cell(body))
        else:
            cell = nbformat.v4.new_code_cell(body)
            if tags:
                cell.metadata["tags"] = tags
            nb.cells.append(cell)
    return nb


def build(source: Path, out: Path = LABS) -> Path:
    nb = parse(source.read_text())
    out.mkdir(parents=True, exist_ok=True)
    NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(out)}}).execute()
    target = out / f"{source.stem}.ipynb"
    nbformat.write(nb, target)
    print(f"{target.name}: slowest cells", ", ".join(f"#{i} {t:.1f} s" for t, i in slowest(nb)))
    return target


def slowest(nb: nbformat.NotebookNode, n: int = 5) -> list[tuple[float, int]]:
    """The ``n`` longest-running code cells, from the timing nbclient records in each cell's metadata."""
    from datetime import datetime

    times = []
    for i, cell in enumerate(nb.cells):
        ex = cell.get("metadata", {}).get("execution", {})
        if "iopub.execute_input" in ex and "shell.execute_reply" in ex:
            start, end = (datetime.fromisoformat(ex[k].replace("Z", "+00:00"))
                          for k in ("iopub.execute_input", "shell.execute_reply"))
            times.append(((end - start).total_seconds(), i))
    return sorted(times, reverse=True)[:n]


if __name__ == "__main__":
    args = sys.argv[1:]
    out = LABS
    if "--out" in args:
        i = args.index("--out")
        out = Path(args[i + 1]).resolve()
        del args[i:i + 2]
    pattern = args[0] if args else ""
    for src in sorted(SOURCES.glob("*.py")):
        if pattern in src.stem:
            print("built", build(src, out))
