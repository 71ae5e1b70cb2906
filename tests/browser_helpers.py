"""Drive the lab in a real browser: a JupyterLab server on loopback and Debian's Chromium through Playwright.

The browser test (tests/test_browser.py) uses these to open each notebook the way a
learner does, run it, and touch its widget panel. Nothing is downloaded: the browser
is the system's ``/usr/bin/chromium`` and the server is the project's own JupyterLab.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

CHROMIUM = Path("/usr/bin/chromium")
PLAYWRIGHT = "playwright"
ROOT = Path(__file__).resolve().parent.parent
# The notebooks the browser test runs: 00 is the course guide (no panel, no prediction), left to nbval.
BROWSER_NOTEBOOKS = tuple(sorted(p.name for p in (ROOT / "labs").glob("0[1-9]*.ipynb")))


def browser_missing() -> str:
    """Why the browser test cannot run here ("" when it can): Debian's Chromium or playwright is missing."""
    import importlib.util

    if not CHROMIUM.exists():
        return f"{CHROMIUM} not found: the browser test needs Debian's Chromium (apt-get install chromium)"
    if importlib.util.find_spec(PLAYWRIGHT) is None:
        return ("the browser test needs playwright (pip install -e '.[test]'); it drives /usr/bin/chromium, "
                "no browser download")
    return ""

# Without the background-networking flags Chromium keeps dialling Google on a closed network.
CHROMIUM_ARGS = (
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
)

# Settings the lab starts with: every cell attached to the page (widgets render off-screen too),
# no news or update checks (no network), no autosave.
LAB_SETTINGS = {
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {"fetchNews": "false",
                                                                        "checkForUpdates": False},
    "@jupyterlab/docmanager-extension/plugin.jupyterlab-settings": {"autosave": False},
}


@dataclass(frozen=True)
class LabServer:
    """A running JupyterLab: its base URL, its token and the folder it serves."""

    base: str
    token: str
    root: Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status
    except urllib.error.HTTPError as err:
        return err.code
    except OSError:
        return 0


def lab_env(home: Path) -> dict[str, str]:
    """The environment for the server and its kernels: Jupyter, IPython and matplotlib write under ``home``."""
    dirs = {"JUPYTER_CONFIG_DIR": "config", "JUPYTER_DATA_DIR": "data", "JUPYTER_RUNTIME_DIR": "runtime",
            "IPYTHONDIR": "ipython", "MPLCONFIGDIR": "matplotlib"}
    env = dict(os.environ)
    for name, sub in dirs.items():
        (home / sub).mkdir(parents=True, exist_ok=True)
        env[name] = str(home / sub)
    env["PYDEVD_DISABLE_FILE_VALIDATION"] = "1"
    env.pop("JUPYTER_PATH", None)
    return env


@contextmanager
def lab_server(notebooks: Path, home: Path, startup_s: float = 120,
               env: dict[str, str] | None = None) -> Iterator[LabServer]:
    """Serve ``notebooks`` with JupyterLab on 127.0.0.1, a free port and a fresh token; stop it afterwards.

    ``--LabApp.expose_app_in_browser`` puts the app on ``window.jupyterapp`` so the test can run commands.
    ``env`` adds variables the server and its kernels see (the journal's and the answer sink's paths).
    """
    settings = home / "settings"
    for name, value in LAB_SETTINGS.items():
        path = settings / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(value))
    port, token = free_port(), secrets.token_hex(16)
    cmd = [sys.executable, "-m", "jupyterlab", f"--ServerApp.root_dir={notebooks}", "--ServerApp.ip=127.0.0.1",
           f"--ServerApp.port={port}", "--ServerApp.port_retries=0", "--no-browser", "--allow-root",
           f"--IdentityProvider.token={token}", "--LabApp.expose_app_in_browser=True",
           f"--LabApp.user_settings_dir={settings}", f"--LabApp.workspaces_dir={home / 'workspaces'}"]
    log = (home / "lab.log").open("wb")
    proc = subprocess.Popen(cmd, cwd=notebooks, env=lab_env(home) | (env or {}), stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + startup_s
        while _status(f"{base}/api/status?token={token}") != 200:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"JupyterLab did not start:\n{(home / 'lab.log').read_text()[-3000:]}")
            time.sleep(0.5)
        yield LabServer(base, token, notebooks)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()


def copy_notebooks(src: Path, dst: Path) -> list[str]:
    """The student copies a learner gets from ``make lab`` (outputs cleared), made in ``dst``.

    Running them in the browser must not touch the committed files, and a student's page
    starts with nothing revealed: exactly what :func:`labkit.course.copies.make_student_copies` makes.
    """
    from labkit.course.copies import make_student_copies

    return list(make_student_copies(src, dst).created)


# JavaScript run in the page. Each returns plain JSON.

# Open a notebook, wait for its kernel, listen for errors on the kernel's iopub channel.
JS_OPEN = """async (path) => {
  const app = window.jupyterapp;
  const panel = await app.commands.execute('docmanager:open', {path, factory: 'Notebook'});
  await panel.context.ready;
  await panel.sessionContext.ready;
  app.shell.activateById(panel.id);
  const kernel = panel.sessionContext.session.kernel;
  window.__labkit = {panel, errors: [], idle: 0, events: [], stalledSince: null};
  // a kernel that dies or restarts, or a dropped connection, stops Run All without an error output
  panel.sessionContext.statusChanged.connect((_, s) => {
    if (['restarting', 'autorestarting', 'dead', 'terminating'].includes(s)) window.__labkit.events.push(s);
  });
  panel.sessionContext.connectionStatusChanged.connect((_, s) => {
    if (s !== 'connected') window.__labkit.events.push('connection ' + s);
  });
  kernel.iopubMessage.connect((_, msg) => {
    const t = msg.header.msg_type;
    // errors of cells show in their outputs; these are the others (a widget's callback)
    if (t === 'error' && msg.parent_header.msg_type !== 'execute_request') {
      window.__labkit.errors.push(msg.content.ename + ': ' + msg.content.evalue);
    }
    if (t === 'status' && msg.content.execution_state === 'idle') window.__labkit.idle += 1;
  });
  const plugins = app.listPlugins ? app.listPlugins() : [];
  return {kernel: kernel.name, widgets: plugins.includes('@jupyter-widgets/jupyterlab-manager:plugin')};
}"""

# Clear the saved outputs (saved widget state would otherwise render without a kernel), then run all.
JS_RUN_ALL = """async () => {
  const app = window.jupyterapp;
  app.shell.activateById(window.__labkit.panel.id);
  await app.commands.execute('notebook:clear-all-cell-outputs');
  void app.commands.execute('notebook:run-all-cells');  // not awaited: the test polls JS_DONE with a timeout
  return true;
}"""

# True once the kernel is idle and every code cell has run, or a cell failed (run-all stops there), or the
# run stopped: the kernel idle, no cell queued and cells left unrun for STALL_MS (a kernel restart, a
# dropped websocket); JS_PROGRESS then says where, and the test fails at once instead of at its timeout.
STALL_MS = 20_000
JS_DONE = """() => {
  const lk = window.__labkit, panel = lk.panel;
  const kernel = panel.sessionContext.session && panel.sessionContext.session.kernel;
  let failed = false, pending = false, running = false;
  for (const cell of panel.model.cells) {
    if (cell.type !== 'code') continue;
    if (cell.executionState === 'running') running = true;
    if (cell.outputs.toJSON().some((o) => o.output_type === 'error')) failed = true;
    if (cell.executionCount === null && cell.sharedModel.getSource().trim() !== '') pending = true;
  }
  if (!kernel || kernel.status !== 'idle' || running) { lk.stalledSince = null; return false; }
  if (failed || !pending) return true;
  if (lk.stalledSince === null) lk.stalledSince = Date.now();
  return Date.now() - lk.stalledSince > STALL_MS;
}""".replace("STALL_MS", str(STALL_MS))

# Where a run stands, for a timeout's message: code cells run of all, and the cell running now.
JS_PROGRESS = """() => {
  const panel = window.__labkit.panel;
  const kernel = panel.sessionContext.session && panel.sessionContext.session.kernel;
  let ran = 0, total = 0, running = null, i = 0;
  for (const cell of panel.model.cells) {
    if (cell.type === 'code') {
      total += 1;
      if (cell.executionCount !== null) ran += 1;
      if (cell.executionState === 'running' && running === null) running = i;
    }
    i += 1;
  }
  return {ran, total, running, kernel: kernel ? kernel.status : 'none', events: window.__labkit.events};
}"""

# Error outputs of the cells, and errors the kernel sent outside them (widget callbacks).
JS_ERRORS = """() => {
  const panel = window.__labkit.panel;
  const found = [];
  let i = 0;
  for (const cell of panel.model.cells) {
    const tags = cell.getMetadata('tags') || [];
    if (cell.type === 'code' && !tags.includes('raises-exception')) {  // nbval's tag for an error on purpose
      for (const out of cell.outputs.toJSON()) {
        if (out.output_type === 'error') found.push(`cell ${i}: ${out.ename}: ${out.evalue}`);
      }
    }
    i += 1;
  }
  return found.concat(window.__labkit.errors.map(e => 'kernel: ' + e));
}"""

# How many times the kernel went idle: a control's change has been handled once this grows.
JS_IDLE_COUNT = "() => window.__labkit.idle"

# Mark the widget panels: an output holding a control (slider or dropdown) and a widget Output.
JS_FIND_PANELS = """() => {
  const node = window.__labkit.panel.node;
  const found = [];
  node.querySelectorAll('.jp-OutputArea-output').forEach((out) => {
    const controls = out.querySelectorAll('.widget-slider, .widget-dropdown');
    const figures = out.querySelectorAll('.widget-output img, .jupyter-widgets-output-area img');
    if (controls.length === 0 || out.querySelector('.jupyter-widgets') === null) return;
    out.setAttribute('data-labkit-panel', String(found.length));
    found.push({sliders: out.querySelectorAll('.widget-slider').length,
                dropdowns: out.querySelectorAll('.widget-dropdown select').length,
                figures: figures.length});
  });
  return found;
}"""

# What a panel shows: its figures (image data) and its text; changes when the panel redraws.
JS_PANEL_STATE = """(index) => {
  const out = document.querySelector(`[data-labkit-panel="${index}"]`);
  const imgs = Array.from(out.querySelectorAll('.widget-output img, .jupyter-widgets-output-area img'));
  const html = Array.from(out.querySelectorAll('.widget-html-content')).map(e => e.innerHTML);
  return {figures: imgs.map(i => i.getAttribute('src') || ''), text: html.join('\\n')};
}"""


def panel_selector(index: int) -> str:
    """CSS selector for the panel that JS_FIND_PANELS marked with ``index``."""
    return f'[data-labkit-panel="{index}"]'
