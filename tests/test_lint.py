"""The code style the project commits to, checked by the same ruff the developers run."""

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_ruff_is_clean():
    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    assert ruff, "ruff is a pinned test dependency; install the project with .[test]"
    done = subprocess.run([ruff, "check", "labkit", "tests", "tools", "instructor"], cwd=ROOT, capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stdout + done.stderr
