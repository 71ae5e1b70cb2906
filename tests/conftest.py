"""Shared test helpers."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import portable_settings
import pytest

ROOT = Path(__file__).resolve().parent.parent


def _torchrun(module: str, *args: str, nproc: int = 2, timeout: float = 120) -> dict:
    """Run ``python -m module args`` under torchrun on 127.0.0.1; rank 0's JSON result (its last line).

    The job runs in its own session and is killed whatever happens, torchrun's workers included.
    """
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [str(Path(sys.executable).parent / "torchrun"), "--nproc-per-node", str(nproc), "--master-addr",
           "127.0.0.1", "--master-port", str(port), "-m", module, *args]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=os.environ | {"GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1"},
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert proc.returncode == 0, err[-2000:]
    return json.loads(out.strip().splitlines()[-1])


@pytest.fixture(autouse=True)
def _journal(tmp_path, monkeypatch):
    """Every test writes the learner's journal (labkit.teach.journal) into its own temp folder, not the checkout."""
    monkeypatch.setenv("LABKIT_JOURNAL", str(tmp_path / "labkit-journal.jsonl"))


@pytest.fixture
def torchrun():
    """``torchrun(module, *args, nproc=2)``: rank 0's result of a real torchrun job on loopback."""
    return _torchrun


# Notebooks 01 and 02 import their exercise modules to register them; the tests do it once here.
import labkit.inter_layer.exercises  # noqa: E402, F401
import labkit.storage.exercises  # noqa: E402, F401

# Test tiers (docs/architecture.md): `make quick` runs `-m "not procs and not notebook and not browser"`.
PROCS = {  # test files that start real process groups, crash workers or subprocesses
    "test_cli.py", "test_course.py", "test_dist.py", "test_inter_layer_pipeline.py", "test_inter_layer_zero.py",
    "test_intra_layer_megatron.py", "test_lab.py", "test_lint.py", "test_resilience_checkpoint.py",
    "test_resilience_crash.py", "test_resilience_failover.py", "test_run_all.py", "test_handin.py",
    "test_portable_outputs.py", "test_build_zero1.py", "test_build_onef1b.py", "test_collect_build.py",
    "test_build_tp.py", "test_build_ckpt.py",
}


def pytest_configure(config: pytest.Config) -> None:
    # Kernels started by nbval and the browser test inherit this: their journal starts empty, outside labs/.
    os.environ["LABKIT_JOURNAL"] = os.path.join(tempfile.mkdtemp(prefix="labkit-journal-"), "labkit-journal.jsonl")
    config.pluginmanager.register(NotebookSettings(), "labkit-notebook-settings")
    for name, what in (("procs", "starts real processes (process groups, crash workers, subprocesses)"),
                       ("notebook", "strict nbval of a notebook in labs/"),
                       ("browser", "runs the lab in headless Chromium")):
        config.addinivalue_line("markers", f"{name}: {what}")


def pytest_report_header(config: pytest.Config) -> str:
    if os.environ.get("LABKIT_PORTABILITY") == "own":
        return "notebooks: strict nbval under this machine's own settings (LABKIT_PORTABILITY=own)"
    shown = ", ".join(f"{nb.name[:2]} {portable_settings.setting_for(nb)}" for nb in sorted(ROOT.glob("labs/0*.ipynb")))
    return f"notebooks: strict nbval under another machine's settings (tests/portable_settings.py): {shown}"


class NotebookSettings:
    """A plugin (registered for the whole session: a conftest's own hooks see only tests/): before a notebook's
    first cell starts its kernel, it gives the kernel another machine's settings (issue 28), since the checked
    outputs must be the same on any CPU and thread count. The kernel inherits os.environ."""

    def __init__(self) -> None:
        self.saved = {k: os.environ.get(k) for k in portable_settings.KEYS}

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        path = Path(str(item.fspath))
        if path.suffix != ".ipynb" or os.environ.get("LABKIT_PORTABILITY") == "own":
            return
        portable_settings.apply(portable_settings.setting_for(path), self.saved)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        path = Path(str(item.fspath))
        if path.suffix == ".ipynb":
            item.add_marker(pytest.mark.notebook)
        elif path.name == "test_browser.py":
            item.add_marker(pytest.mark.browser)
        elif path.name in PROCS or path.name.startswith("test_reliability_"):
            item.add_marker(pytest.mark.procs)
