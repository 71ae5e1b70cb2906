"""The sandboxed side: defines the learner's function and answers calls on it; decides nothing.

``python -m labkit.course.sandbox.child [--drop UID] --limits JSON --fds REQ REP`` sets its rlimits, drops to
``UID`` where it was started as root (:func:`drop_to`), then serves requests from the grader
(:mod:`labkit.course.sandbox.channel`) until the pipe closes:

* ``define``: exec the submitted source in a fresh namespace and pick its function;
* ``call``: call that function on the arguments sent, reply with what it returned or what it raised;
* ``spy``: record the calls to ``os.fsync``/``os.fdatasync``/``os.replace``/``os.rename`` between on and off
  (what notebook 06's checkpoint exercise asks about), reply with their names;
* ``build``: run a build-it module's ranks (``labkit.practice.build.harness.collect_record``) and reply with
  their record, plain data.

Everything here runs beside the learner's code, which may replace any of it: the grader trusts no reply beyond
its being plain data, and computes every verdict itself (:mod:`labkit.course.sandbox.coding`).
"""

from __future__ import annotations

import json
import os
import resource
import sys

from labkit.course.sandbox import channel

SPIED = ("fsync", "fdatasync", "replace", "rename")


def set_limits(limits: dict) -> None:
    for name, value in (("RLIMIT_CPU", limits["cpu_s"]), ("RLIMIT_AS", limits["address_bytes"]),
                        ("RLIMIT_NPROC", limits["processes"]), ("RLIMIT_FSIZE", limits["file_bytes"]),
                        ("RLIMIT_CORE", 0)):
        resource.setrlimit(getattr(resource, name), (int(value), int(value)))


def drop_to(uid: int) -> None:
    """Become ``uid`` (no groups, no capability left); refuse to go on otherwise."""
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)
    status = dict(line.split(":", 1) for line in open("/proc/self/status").read().splitlines() if ":" in line)
    if os.getuid() != uid or any(int(status[k].strip(), 16) for k in ("CapEff", "CapPrm", "CapAmb")):
        sys.exit("labkit sandbox: could not drop privileges")


class Spy:
    """Wraps the os calls of :data:`SPIED` while on; the names called, in order."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.real = {n: getattr(os, n) for n in SPIED if hasattr(os, n)}

    def on(self) -> None:
        for name, real in self.real.items():
            def spy(*args, _name=name, _real=real, **kw):
                self.calls.append(_name)
                return _real(*args, **kw)
            setattr(os, name, spy)

    def off(self) -> list[str]:
        for name, real in self.real.items():
            setattr(os, name, real)
        return self.calls[:1000]


def pick(namespace: dict, name: str | None):
    fn = namespace.get(name or "")
    if not callable(fn):
        fns = [v for v in namespace.values() if callable(v) and getattr(v, "__module__", "") is None]
        fn = fns[-1] if fns else None
    return fn


def raised(err: BaseException) -> dict:
    return {"raised": type(err).__name__, "message": str(err)[:2000]}


def serve(req: int, rep: int) -> None:
    fn, spy = None, None
    while (msg := channel.read_request(req)) is not None:
        seq, op = msg["seq"], msg["op"]
        try:
            if op == "define":
                namespace: dict = {}
                exec(compile(msg["source"], msg.get("filename", "<hand-in>"), "exec"), namespace)  # noqa: S102
                fn = pick(namespace, msg.get("function"))
                out = {"defined": fn is not None, "name": getattr(fn, "__name__", "")}
            elif op == "call":
                if fn is None:
                    raise LookupError("no function was defined")
                out = {"value": fn(*msg["args"], **msg["kwargs"])}
            elif op == "spy":
                if msg["on"]:
                    spy = Spy()
                    spy.on()
                    out = {}
                else:
                    out = {"calls": spy.off() if spy else []}
            elif op == "build":
                from labkit.practice.build import harness

                out = {"record": harness.collect_record(msg["key"], msg["path"], msg["params"])}
            else:
                out = {"raised": "LookupError", "message": f"no such request {op!r}"}
        except BaseException as err:  # noqa: BLE001 - the learner's code may raise anything, exit included
            out = raised(err)
        try:
            channel.send_reply(rep, seq, out)
        except Exception as err:  # noqa: BLE001 - a value that is not plain data: say so instead
            channel.send_reply(rep, seq, {"raised": "TypeError", "message": f"the function returned a value that "
                                          f"is not plain data ({type(err).__name__}: {str(err)[:200]})"})


def main(argv: list[str]) -> None:
    if argv[:1] == ["--probe"]:  # root mode's start-up check: drop, then run the check
        drop_to(int(argv[1]))
        os.execv(sys.executable, [sys.executable, *argv[3:]])
    drop = None
    if argv[:1] == ["--drop"]:
        drop, argv = int(argv[1]), argv[2:]
    limits = json.loads(argv[argv.index("--limits") + 1])
    req, rep = (int(x) for x in argv[argv.index("--fds") + 1:][:2])
    set_limits(limits)
    if drop is not None:
        drop_to(drop)
    sys.stdin.close()
    serve(req, rep)


if __name__ == "__main__":
    main(sys.argv[1:])
