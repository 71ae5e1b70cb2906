"""Shared test helpers."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

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


@pytest.fixture
def torchrun():
    """``torchrun(module, *args, nproc=2)``: rank 0's result of a real torchrun job on loopback."""
    return _torchrun
