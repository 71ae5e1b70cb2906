"""A recorded step in memory_viz's snapshot format, so a learner can open a 70B step on pytorch.org/memory_viz.

``torch.cuda.memory._snapshot()`` returns ``{"segments": [...], "device_traces": [[event, ...]]}``, each event
an ``alloc``, ``free_requested`` or ``free_completed`` of ``size`` bytes at ``addr`` with the Python
``frames`` that made it; ``torch.cuda._memory_viz`` (``trace``, ``trace_plot``) and the web viewer read a
pickle of it. ``snapshot_of`` writes the lab's recorded step the same way: one allocation per storage,
its frames naming the module (or the layer backward had reached), the phase and the category, and the
storages alive before the step first, so the replayed bytes rise to the measured peak exactly
(``replayed_peak``). Addresses are made up (a bump pointer, never reused): a fake step has none. Only
plain dicts, lists, strings and ints go in the pickle, and the lab never loads one it did not write.
"""

from __future__ import annotations

import pickle
from pathlib import Path

from labkit.measure.fake_step import RecordedStep, layer_label

BASE = 0x7F0000000000


def snapshot_of(rec: RecordedStep) -> dict:
    """The snapshot dict of a recorded step (``device_traces[0]``: every arrival and free, in order)."""
    trace, addr, where_of, nxt = [], {}, {}, BASE
    for e in rec.events:
        kind = rec.kinds.get(e.uid, "temporaries")
        if e.delta > 0:
            addr[e.uid], nxt = nxt, nxt + max(e.delta, 1)
            place = layer_label(e.where, rec.blocks) or ("before the step" if e.phase == "before" else "(model)")
            where_of[e.uid] = [{"filename": place, "line": 0, "name": f"{e.phase}: {kind}"}]
            trace.append({"action": "alloc", "addr": addr[e.uid], "size": e.delta, "stream": 0,
                          "frames": where_of[e.uid]})
        elif e.uid in addr:
            frames = where_of[e.uid] + [{"filename": layer_label(e.where, rec.blocks) or "(model)", "line": 0,
                                         "name": f"freed in {e.phase}"}]
            for action in ("free_requested", "free_completed"):
                trace.append({"action": action, "addr": addr[e.uid], "size": -e.delta, "stream": 0, "frames": frames})
    return {"segments": [], "device_traces": [trace]}


def write_snapshot(rec: RecordedStep, path: str | Path) -> Path:
    """Write ``snapshot_of(rec)`` as a pickle (what ``python -m torch.cuda._memory_viz trace`` reads)."""
    path = Path(path)
    with path.open("wb") as f:
        pickle.dump(snapshot_of(rec), f, protocol=4)
    return path


def replayed_peak(snapshot: dict) -> int:
    """The most bytes alive at once when the trace is replayed: allocs added, completed frees subtracted."""
    alive = peak = 0
    for e in snapshot["device_traces"][0]:
        if e["action"] == "alloc":
            alive += e["size"]
        elif e["action"] == "free_completed":
            alive -= e["size"]
        peak = max(peak, alive)
    return peak
