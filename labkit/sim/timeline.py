"""An event timeline of streams: tasks placed in time by their order and dependencies.

Written by hand: no library ships a simulator of this kind. A stream (a CUDA stream, a
rank, a link, a disk) runs its tasks in the order given, like a CUDA stream or a rank's
program does, and a task starts once the previous task on its stream and all its
dependencies have ended. Nothing else is modelled: no contention between streams.
``labkit.sim`` re-exports everything here and adds the pipeline schedules.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from labkit.errors import LabkitError


@dataclass(frozen=True)
class Task:
    """Work of ``duration`` seconds on ``stream``, after the tasks named in ``deps``."""

    name: str
    stream: str
    duration: float
    deps: tuple[str, ...] = ()
    kind: str = ""
    meta: dict[str, Any] = field(default_factory=dict, hash=False)


@dataclass(frozen=True)
class Event:
    """A task placed in time: it ran on ``stream`` from ``start`` to ``end`` (seconds)."""

    name: str
    stream: str
    start: float
    end: float
    kind: str = ""
    meta: dict[str, Any] = field(default_factory=dict, hash=False)

    @property
    def duration(self) -> float:
        return self.end - self.start


@dataclass
class Timeline:
    """The events of one simulation, in the order they were given per stream."""

    events: list[Event]

    @property
    def makespan(self) -> float:
        return max((e.end for e in self.events), default=0.0)

    @property
    def streams(self) -> list[str]:
        """Stream names in order of first appearance."""
        return list(dict.fromkeys(e.stream for e in self.events))

    def on(self, stream: str) -> list[Event]:
        return [e for e in self.events if e.stream == stream]

    def busy(self, stream: str) -> float:
        return sum(e.duration for e in self.on(stream))

    def idle_fraction(self, streams: list[str] | None = None) -> float:
        """1 - busy / (makespan * number of streams): the share of stream-time spent waiting."""
        names = self.streams if streams is None else streams
        if not names or self.makespan == 0:
            return 0.0
        return 1 - sum(self.busy(s) for s in names) / (self.makespan * len(names))


def simulate(tasks: list[Task]) -> Timeline:
    """Place every task at max(end of the previous task on its stream, ends of its deps)."""
    names: set[str] = set()
    for t in tasks:
        if t.name in names:
            raise LabkitError(f"task names must be unique (task {t.name!r} appears twice)")
        names.add(t.name)
    queues: dict[str, list[Task]] = defaultdict(list)
    for t in tasks:
        if t.duration < 0:
            raise LabkitError(f"duration of task {t.name!r} must be >= 0 (got {t.duration!r})")
        missing = [d for d in t.deps if d not in names]
        if missing:
            raise LabkitError(f"task {t.name!r} depends on unknown task(s) {', '.join(map(repr, missing))}")
        queues[t.stream].append(t)
    end: dict[str, float] = {}
    placed: dict[str, Event] = {}
    heads = dict.fromkeys(queues, 0)
    progress = True
    while progress:
        progress = False
        for stream, queue in queues.items():
            while heads[stream] < len(queue) and all(d in end for d in queue[heads[stream]].deps):
                t = queue[heads[stream]]
                prev = end[queue[heads[stream] - 1].name] if heads[stream] else 0.0
                start = max([prev, *(end[d] for d in t.deps)])
                end[t.name] = start + t.duration
                placed[t.name] = Event(t.name, stream, start, end[t.name], t.kind, dict(t.meta))
                heads[stream] += 1
                progress = True
    if len(placed) < len(tasks):
        stuck = [(q[heads[s]].name, [d for d in q[heads[s]].deps if d not in end])
                 for s, q in queues.items() if heads[s] < len(q)]
        shown = "; ".join(f"task {n!r} waits for {', '.join(map(repr, w))}" for n, w in stuck)
        raise LabkitError(f"dependency cycle or deadlock: {shown}")
    return Timeline([placed[t.name] for t in tasks])
