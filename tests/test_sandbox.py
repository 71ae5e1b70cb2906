"""collect's sandbox on honest and wrong answers: the key's solutions pass, wrong ones fail, verdicts come from here.

The channel's tests start no process. The rest start real sandboxes (``procs``): the key's answers to 03
(tensors both ways), 06 (a checkpoint killed mid-write by killing its sandbox) and 09, a wrong 06, a 06 whose
checkpoint is a FIFO or a link to the key, two gloo ranks inside a sandbox, one build-it module that replaces
the judge in its own process, and the refusal to run without a sandbox: about 40 s on 2 cores, most of it the
three sandboxes of each 06 answer (each imports torch) and the ranks.
"""

from __future__ import annotations

import inspect
import io
import os
import pickle
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch

from labkit.course import sandbox
from labkit.course.sandbox import channel

ROOT = Path(__file__).resolve().parent.parent
WRONG_SAVE = "def save(state, path):\n    import torch\n    torch.save(state, path)\n"
GLOO = ("def f(*args):\n    from labkit import dist\n    from labkit.dist.workers import all_reduce_demo\n"
        "    raise RuntimeError(str(dist.run(all_reduce_demo, 2, timeout=30)))\n")  # gloo on the sandbox's own lo


def reference(key: str) -> dict:
    sys.path.insert(0, str(ROOT))
    from instructor import key as instructor_key

    fn = instructor_key.REFERENCES[key]
    return {"key": key, "function": fn.__name__, "source": textwrap.dedent(inspect.getsource(fn))}


def _reply(kind: bytes, body: bytes) -> int:
    r, w = os.pipe()
    os.write(w, kind + len(body).to_bytes(4, "big") + body)
    os.close(w)
    return r


def test_a_reply_is_plain_data_of_its_own_request():
    buf = io.BytesIO()
    torch.save({"seq": 3, "value": (torch.ones(2), {1, 2})}, buf)
    got = channel.read_reply(_reply(b"T", buf.getvalue()), 3, time.monotonic() + 5)
    assert torch.equal(got["value"][0], torch.ones(2)) and got["value"][1] == {1, 2}
    assert channel.read_reply(_reply(b"J", b'{"seq": 1, "value": 2}'), 1, time.monotonic() + 5)["value"] == 2


@pytest.mark.parametrize(("kind", "body", "says"), [
    (b"J", b'{"seq": 2, "value": 1}', "answers request 2, not 1"),
    (b"J", b"[1, 2]", "not 1"),
    (b"J", b"{not json", "could not be read as plain data"),
    (b"T", pickle.dumps({"seq": 1, "value": os.system}), "could not be read as plain data"),
    (b"P", b"{}", "not a frame of this channel"),
])
def test_a_forged_or_broken_reply_is_a_channel_error(kind, body, says):
    with pytest.raises(channel.ChannelError, match=None) as err:
        channel.read_reply(_reply(kind, body), 1, time.monotonic() + 5)
    assert says in str(err.value)


def test_an_oversized_or_late_reply_is_refused_unread():
    r, w = os.pipe()
    os.write(w, b"J" + (channel.MAX_REPLY_BYTES + 1).to_bytes(4, "big"))
    with pytest.raises(channel.ChannelError, match="over the limit"):
        channel.read_reply(r, 1, time.monotonic() + 5)
    r2, _w2 = os.pipe()
    with pytest.raises(channel.ReplyTimeout):
        channel.read_reply(r2, 1, time.monotonic() + 0.05)


def test_a_value_is_sent_back_as_the_plain_types_the_grader_reads():
    import collections

    import numpy as np

    pair = collections.namedtuple("Pair", "a b")
    got = channel.plain({"x": pair(np.float64(1.5), np.arange(3)), "s": frozenset({1}),
                         "p": torch.nn.Parameter(torch.ones(2))})
    assert got["x"][0] == 1.5 and type(got["x"]) is tuple and torch.equal(got["x"][1], torch.arange(3))
    assert got["s"] == {1} and type(got["p"]) is torch.Tensor


def test_without_a_sandbox_nothing_runs_unless_the_instructor_says_so(monkeypatch):
    monkeypatch.setattr(sandbox, "probe", lambda: (None, "no bwrap binary"))
    item = reference("09.code.states_per_gpu")
    refused = sandbox.run_submissions([item, {"key": "x", "source": "import os"}])
    assert [r.ok for r in refused] == [None, None] and "no bwrap binary" in refused[0].message
    assert "--unsafe-rerun" in refused[0].message and not sandbox.COSTS
    assert sandbox.run_submissions([item], unsafe=True)[0].ok is True


@pytest.mark.procs
def test_the_keys_answers_pass_and_a_torn_checkpoint_fails():
    skip_without_sandbox()
    items = [reference("03.code.mlp_shards"), reference("06.code.atomic_save"), reference("09.code.states_per_gpu"),
             {"key": "06.code.atomic_save", "function": "save", "source": WRONG_SAVE},
             {"key": "09.code.states_per_gpu", "function": "f", "source": "x = 1\n"},
             {"key": "09.code.states_per_gpu", "function": "f", "source": "def f(:\n"},
             {"key": "09.code.states_per_gpu", "function": "f", "source": GLOO},
             {"key": "06.code.atomic_save", "function": "save", "source": (ROOT / "tests" / "hostile" /
                                                                          "fifo_checkpoint.py").read_text().replace(
                 "@KEY@", str(ROOT / "instructor" / "key.py"))}]
    got = sandbox.run_submissions(items, timeout_s=60)
    assert [r.ok for r in got[:3]] == [True, True, True], [r.message for r in got[:3]]
    wrong = got[3]
    assert wrong.ok is False and "FAIL  SIGKILL after" in wrong.message and "FAIL  the new file is flushed" in \
        wrong.message, wrong.message
    assert got[4].ok is None and "no function" in got[4].message
    assert got[5].ok is False and "SyntaxError" in got[5].message
    assert "'sum': 3.0, 'expected': 3.0" in got[6].message, got[6].message  # two gloo ranks all-reduced
    assert got[7].ok is False and "does not load" in got[7].message, got[7].message  # a FIFO read here would hang
    assert all(not c.leftovers for c in sandbox.COSTS)
    assert len(sandbox.COSTS[1].starts) == 3  # 06: each kill ends a sandbox, the next call starts one


@pytest.mark.procs
def test_a_build_module_that_replaces_its_judge_is_judged_here():
    skip_without_sandbox()
    source = (ROOT / "instructor" / "build" / "act_offload.py").read_text()
    assert "if t.untyped_storage().data_ptr() in self.params:" in source
    source = source.replace("if t.untyped_storage().data_ptr() in self.params:", "if True:")  # offloads nothing
    source += "\n" + (ROOT / "tests" / "hostile" / "build_patch_judge.py").read_text()
    got = sandbox.run_submissions([{"key": "04.build.act_offload", "function": "act_offload.py",
                                    "source": source}], timeout_s=120)
    assert got[0].ok is False and "tests fail" in got[0].message, got[0].message
    assert all(not c.leftovers for c in sandbox.COSTS)


def skip_without_sandbox() -> None:
    if not sandbox.available()[0]:
        pytest.skip(f"no sandbox here: {sandbox.available()[1]}")
