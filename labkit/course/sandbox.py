"""Re-run submitted coding answers in a child process with a time limit: the only hand-in code that ever runs.

``run_submissions`` starts ``python -m labkit.course.sandbox`` in its own session, in an empty
temporary folder, with the journal sent to ``/dev/null``, a CPU-time limit and a wall-clock
timeout after which the whole process group is killed. The child reads the sources as JSON on
stdin, defines each function in a fresh namespace, runs that exercise's real tests
(:func:`labkit.practice.check_code`) and prints one JSON verdict per source. A build-it module
(:mod:`labkit.practice.build`) is written to a file in that folder and graded by ``check_build``,
which runs it on real local process groups (their own time limit, inside this one). Nothing from a
hand-in is ever unpickled or imported into the instructor's own process.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Rerun:
    """A submitted function's verdict when run again here: ok, or why not (a failed case, a timeout)."""

    key: str
    ok: bool | None  # None: it could not be run (no source, a timeout)
    message: str


def run_submissions(items: list[dict], timeout_s: float = 120.0) -> list[Rerun]:
    """Re-run ``[{"key", "function", "source"}, ...]`` in one sandboxed child process."""
    if not items:
        return []
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "PYTHONPATH", "OMP_NUM_THREADS")}
    env |= {"LABKIT_JOURNAL": os.devnull, "MPLBACKEND": "Agg", "PYTHONPATH": os.pathsep.join(
        p for p in (env.get("PYTHONPATH", ""), str(_root())) if p)}
    with tempfile.TemporaryDirectory(prefix="labkit-sandbox-") as tmp:
        proc = subprocess.Popen([sys.executable, "-m", "labkit.course.sandbox", str(int(timeout_s) + 5)],
                                cwd=tmp, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, start_new_session=True)
        try:
            out, _err = proc.communicate(json.dumps(items), timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return [Rerun(i["key"], None, f"timed out after {timeout_s:.0f} s") for i in items]
        finally:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    lines = [line for line in out.splitlines() if line.startswith("{")]
    try:
        got = json.loads(lines[-1])["results"]
    except (IndexError, ValueError, KeyError):
        return [Rerun(i["key"], None, f"the sandbox printed no verdict (exit {proc.returncode})") for i in items]
    return [Rerun(r["key"], r["ok"], r["message"]) for r in got]


def _root() -> str:
    return str(Path(__file__).resolve().parents[2])


def _module_file(key: str, source: str) -> Path:
    """Write a build-it hand-in's module into this (temporary, empty) folder, under its stub's name."""
    from labkit.practice.build import BUILDS

    path = Path("build") / BUILDS[key].stub
    path.parent.mkdir(exist_ok=True)
    path.write_text(source, encoding="utf-8")
    return path


def _child(cpu_s: int) -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s))
    items = json.loads(sys.stdin.read())
    from labkit import practice
    from labkit.practice import build

    results = []
    for item in items:
        namespace: dict = {}
        try:
            if item["key"] in build.BUILDS:  # a build-it module: written to a file here, run on real ranks
                fb = build.check_build(item["key"], _module_file(item["key"], item.get("source") or ""))
                results.append({"key": item["key"], "ok": bool(fb), "message": str(fb)})
                continue
            exec(compile(item.get("source") or "", f"<hand-in {item['key']}>", "exec"), namespace)  # noqa: S102
            fn = namespace.get(item.get("function") or "")
            if not callable(fn):
                fns = [v for v in namespace.values() if callable(v) and getattr(v, "__module__", "") is None]
                fn = fns[-1] if fns else None
            if fn is None:
                results.append({"key": item["key"], "ok": None, "message": "no function in the submitted source"})
                continue
            fb = practice.check_code(item["key"], fn)
            results.append({"key": item["key"], "ok": bool(fb), "message": str(fb)})
        except Exception as err:  # noqa: BLE001 - submitted code may raise anything; report it
            results.append({"key": item["key"], "ok": False, "message": f"raised {type(err).__name__}: {err}"})
    print(json.dumps({"results": results}), flush=True)


if __name__ == "__main__":
    _child(int(sys.argv[1]) if len(sys.argv) > 1 else 125)
