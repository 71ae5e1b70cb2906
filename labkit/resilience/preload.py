"""Imported once by the crash launcher's forkserver, so that every child it forks starts warm.

A first ``Trainer`` and a first checkpoint cost about a second each on a small machine,
nearly all of it torch's lazy imports (the optimizer pulls in much of ``torch._dynamo``,
DCP its planners) and the corpus encoding; a child forked after them is training within
milliseconds. Everything runs on one thread, as the workers do, so no thread pool exists
in the server when it forks.
"""

import tempfile

from labkit.resilience.checkpoint import save_checkpoint
from labkit.resilience.scan import resume
from labkit.resilience.worker import micro_config
from labkit.rig.train import Trainer

with tempfile.TemporaryDirectory(prefix="labkit-warm-") as _d:
    _t = Trainer(micro_config())
    _t.step()
    save_checkpoint(_t, _d)
    resume(Trainer(micro_config()), _d)
