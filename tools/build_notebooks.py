"""Build labs/*.ipynb from their percent-format sources in tools/notebooks/, and execute them.

The .py source is what people edit and review; the .ipynb with its stored outputs is
what learners open and what strict nbval checks. Cells start with ``# %%`` (code) or
``# %% [markdown]``; ``# %% tags=["nbval-ignore-output"]`` tags a code cell.

    python tools/build_notebooks.py            # build and execute every notebook
    python tools/build_notebooks.py 01         # only those whose name contains "01"
    python tools/build_notebooks.py 01 --out /tmp/try   # a trial run: write there, leave labs/ alone

Cell ids are derived from the notebook and each cell's first line (nbformat 4.5 ids), so a rebuild
keeps them and a diff or a student's copy can refer to a cell. The kernel's journal goes to a
temporary file (never into labs/), and every reveal's value is gathered into
``instructor/predictions.json`` for the answer key (``predictions.json`` in ``--out`` on a trial).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
import tempfile
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ROOT / "tools" / "notebooks"
LABS = ROOT / "labs"
ANSWERS = ROOT / "instructor" / "predictions.json"
HEADER = re.compile(r"^# %%(?P<md> \[markdown\])?(?: tags=(?P<tags>\[.*\]))?\s*$")


def cell_id(notebook: str, body: str, seen: set[str]) -> str:
    """A stable id: the notebook's number and a hash of the cell's first line (a counter after repeats)."""
    first = body.strip().splitlines()[0] if body.strip() else ""
    base = f"{notebook[:2]}-{hashlib.sha256(first.encode()).hexdigest()[:10]}"
    cid, n = base, 1
    while cid in seen:
        n += 1
        cid = f"{base}-{n}"
    seen.add(cid)
    return cid


def parse(text: str, name: str = "nb") -> nbformat.NotebookNode:
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
    seen: set[str] = set()
    for cell in nb.cells:
        cell.id = cell_id(name, cell.source, seen)
    return nb


def build(source: Path, out: Path = LABS) -> Path:
    nb = parse(source.read_text(), source.stem)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="labkit-build-") as tmp:
        sink = Path(tmp) / "answers.jsonl"
        os.environ |= {"LABKIT_JOURNAL": str(Path(tmp) / "journal.jsonl"), "LABKIT_ANSWER_SINK": str(sink)}
        NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(out)}}).execute()
        record_answers(sink, ANSWERS if out == LABS else out / "predictions.json")
    target = out / f"{source.stem}.ipynb"
    nbformat.write(nb, target)
    print(f"{target.name}: slowest cells", ", ".join(f"#{i} {t:.1f} s" for t, i in slowest(nb)))
    return target


def record_answers(sink: Path, target: Path) -> None:
    """Merge the values the reveals showed (one JSON line each) into ``target``, keyed by prediction id."""
    if not sink.is_file():
        return
    known = json.loads(target.read_text()) if target.is_file() else {}
    for line in sink.read_text().splitlines():
        item = json.loads(line)
        known[item["key"]] = item["answer"]
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(dict(sorted(known.items())), indent=1) + "\n")


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
