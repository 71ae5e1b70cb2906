"""The grader's side of a build-it module: parameters drawn here, the ranks run in the sandbox, the verdict here.

:func:`grade_build` draws the run's parameters (``harness.draw_params``, a fresh seed) and, where the
instructor's ``instructor/build/hidden.json`` exists, the hidden runs' parameters (read by this process; the
sandbox only receives the parameters of the run it does). The module is written into the sandbox's work folder,
the child runs its ranks there (``harness.collect_record``, real gloo groups on the sandbox's own loopback) and
sends back their record as plain data, and ``harness.judge_record`` judges it here against a reference this
process computes. A record the learner's code forged or broke is a failed case, never an exception.
"""

from __future__ import annotations

from pathlib import Path

from labkit.course.sandbox import channel
from labkit.course.sandbox.remote import Runner, remote_error


def grade_build(key: str, runner: Runner, source: str) -> tuple[bool | None, str]:
    """(ok, message) of the module ``source`` for build-it exercise ``key``; None when it cannot be run here."""
    from labkit.practice.build import feedback, harness
    from labkit.practice.coding import Case

    ex = harness.BUILDS[key]
    if harness.is_blank(key, source):
        return False, f"Not written yet: {ex.stub} is still the stub."
    if ex.draw is None or ex.collect is None or ex.judge is None:
        return None, f"{key} has no draw/collect/judge: it cannot be judged outside the process that runs it"
    path = runner.work / "build" / ex.stub
    path.parent.mkdir(exist_ok=True)
    path.write_text(source, encoding="utf-8")
    params = harness.draw_params(key)
    runs = [params, *(harness.hidden_params(key, params) if harness.HIDDEN.is_file() else [])]
    cases: list[Case] = []
    for i, p in enumerate(runs):
        try:
            reply = runner.request({"op": "build", "key": key, "path": str(path), "params": p}, define=False)
        except channel.ChannelError as err:
            return False, f"the sandboxed run failed: {err}"
        if "raised" in reply:
            err = remote_error(reply)
            kind = type(err).__name__
            name = "the module imports" if kind == "SyntaxError" else "the run completes"
            got = [Case(name, False, f"{kind}: {err}")]
        elif "record" not in reply:
            got = [Case("the run's record is well-formed", False, "the sandbox replied without a record")]
        elif message := harness.not_written(reply["record"]):
            return False, f"Not written yet: part of {Path(path).name} still raises NotImplementedError ({message})."
        else:
            got = harness.judge_record(key, reply["record"], p)
        cases += got if i == 0 else [Case(f"hidden {i}: {c.name}", c.ok, c.detail, c.hints) for c in got]
    fb = feedback.feedback(key, cases)
    return fb.ok, str(fb)
