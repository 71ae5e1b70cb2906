"""Run one notebook source top to bottom in a plain IPython shell, as "Run All" would, then commit right answers.

Used by test_run_all.py in a child process: ``python tests/notebook_runner.py SOURCE OUT``. No Jupyter
kernel is started (a kernel, its messages and nbclient cost more than some notebooks), but the cells
run in an IPython ``InteractiveShell``, so each cell's last expression is displayed as in a notebook.
Writes ``OUT/run.json``: each code cell's source and text output, and the answers the reveals knew
(``$LABKIT_ANSWER_SINK``), each then committed with ``checks.predict`` as a student would after Run All.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main(source: Path, out: Path) -> None:
    sys.path.insert(0, str(ROOT / "tools"))
    from build_notebooks import parse
    from IPython.core.interactiveshell import InteractiveShell

    os.chdir(out)
    shell = InteractiveShell.instance()
    cells = []
    for i, cell in enumerate(parse(source.read_text(), source.stem).cells):
        if cell.cell_type != "code":
            continue
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
            result = shell.run_cell(cell.source, store_history=True)
        cells.append({"index": i, "source": cell.source, "output": buf.getvalue(), "ok": bool(result.success)})
    from labkit.teach import checks

    sink = Path(os.environ["LABKIT_ANSWER_SINK"])
    answers = [json.loads(line) for line in sink.read_text().splitlines()] if sink.is_file() else []
    for a in answers:
        checks.predict(a["key"], a["answer"])
    (out / "run.json").write_text(json.dumps({"cells": cells, "answers": answers}))


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
