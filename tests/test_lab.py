"""`make lab` serves the student copies of the lab: on 127.0.0.1 only, behind a token, outputs cleared."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as err:
        return err.code, b""


def _listeners(port: int) -> set[str]:
    """Local addresses (hex, as /proc/net/tcp* writes them) listening on ``port``."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        if not os.path.exists(table):
            continue
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            addr, hexport = local.split(":")
            if state == "0A" and int(hexport, 16) == port:
                found.add(addr)
    return found


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_lab_serves_on_loopback_with_a_token():
    port, token = _free_port(), secrets.token_hex(8)
    proc = subprocess.Popen(["make", "-s", "lab", f"PORT={port}"], cwd=ROOT,
                            env=os.environ | {"LABKIT_TOKEN": token},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                status, _ = _get(f"{base}/api/status?token={token}")
            except OSError:
                status = 0
            if status == 200:
                break
            assert proc.poll() is None, proc.stdout.read().decode()
            assert time.monotonic() < deadline, "make lab did not answer within 90 s"
            time.sleep(0.5)
        status, body = _get(f"{base}/api/contents?token={token}")
        names = {item["name"] for item in json.loads(body)["content"]}
        assert status == 200 and "01_storage_challenges.ipynb" in names
        status, body = _get(f"{base}/api/contents/01_storage_challenges.ipynb?token={token}")
        cells = json.loads(body)["content"]["cells"]
        assert status == 200 and not any(c.get("outputs") for c in cells)  # the student's copy: nothing revealed
        assert _get(f"{base}/lab?token={token}")[0] == 200
        assert _get(f"{base}/api/contents")[0] == 403  # no token, no access
        assert _listeners(port) and _listeners(port) <= {"0100007F"}  # 127.0.0.1 and nothing else
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
