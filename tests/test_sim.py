"""The stream simulator and the pipeline schedules, checked against torch's own orders and the papers' formulas."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from matplotlib.figure import Figure

from labkit.errors import LabkitError
from labkit.sim import (
    KINDS,
    Action,
    Task,
    Timeline,
    bubble_fraction,
    bubble_over_ideal,
    measured_bubble,
    peak_in_flight,
    schedule,
    simulate,
    simulate_pipeline,
    torch_order,
)
from labkit.teach.plots import gantt

ts = pytest.importorskip("torch.distributed.pipelining.schedules")

GRID = [(p, m) for p in (1, 2, 3, 4, 5) for m in range(1, 10)]
CHUNKS = (2, 3, 4)


def valid(kind: str, p: int, m: int, v: int = 1) -> bool:
    try:
        schedule(kind, p, m, v)
    except LabkitError:
        return False
    return True


def check_timeline(tasks: list[Task], tl: Timeline) -> None:
    """Every event starts exactly when its stream and its deps let it: no overlap, deps respected."""
    ends = {e.name: e.end for e in tl.events}
    by_name = {t.name: t for t in tasks}
    for stream in tl.streams:
        prev = 0.0
        for e in tl.on(stream):
            deps = [ends[d] for d in by_name[e.name].deps]
            assert e.start == max([prev, *deps])
            assert e.end - e.start == pytest.approx(by_name[e.name].duration)
            prev = e.end


# The event timeline


def test_simulate_orders_streams_and_waits_for_deps() -> None:
    tasks = [
        Task("load", "copy", 2.0),
        Task("a", "compute", 1.0),
        Task("b", "compute", 1.0, deps=("load",)),
        Task("save", "copy", 0.5, deps=("b",)),
    ]
    tl = simulate(tasks)
    start = {e.name: (e.start, e.end) for e in tl.events}
    assert start == {"load": (0.0, 2.0), "a": (0.0, 1.0), "b": (2.0, 3.0), "save": (3.0, 3.5)}
    assert tl.streams == ["copy", "compute"]
    assert tl.makespan == 3.5
    assert tl.busy("copy") == 2.5 and tl.busy("compute") == 2.0
    assert tl.idle_fraction() == pytest.approx(1 - 4.5 / 7.0)
    assert tl.idle_fraction(["compute"]) == pytest.approx(1 - 2.0 / 3.5)
    assert Timeline([]).makespan == 0.0 and Timeline([]).idle_fraction() == 0.0


def test_simulate_rejects_bad_tasks_naming_them() -> None:
    with pytest.raises(LabkitError, match=r"task 'b' depends on unknown task\(s\) 'nope'"):
        simulate([Task("a", "s", 1.0), Task("b", "s", 1.0, deps=("nope",))])
    with pytest.raises(LabkitError, match="duration of task 'a' must be >= 0"):
        simulate([Task("a", "s", -1.0)])
    with pytest.raises(LabkitError, match="unique"):
        simulate([Task("a", "s", 1.0), Task("a", "t", 1.0)])
    with pytest.raises(LabkitError, match="cycle or deadlock: task 'x' waits for 'y'; task 'y' waits for 'x'"):
        simulate([Task("x", "s", 1.0, deps=("y",)), Task("y", "t", 1.0, deps=("x",))])
    # program order makes this a deadlock although the deps alone are acyclic
    with pytest.raises(LabkitError, match="task 'first' waits for 'late'"):
        simulate([Task("first", "s", 1.0, deps=("late",)), Task("late", "s", 1.0)])


@st.composite
def task_graphs(draw: st.DrawFn) -> list[Task]:
    """Tasks in a global order that every stream and every dep follows, so none can deadlock."""
    n = draw(st.integers(1, 25))
    tasks = []
    for i in range(n):
        deps = draw(st.sets(st.integers(0, i - 1), max_size=3)) if i else set()
        tasks.append(Task(f"t{i}", f"s{draw(st.integers(0, 3))}", draw(st.floats(0, 10)),
                          tuple(f"t{d}" for d in sorted(deps))))
    return tasks


@settings(max_examples=60, deadline=None)
@given(task_graphs())
def test_simulate_properties(tasks: list[Task]) -> None:
    tl = simulate(tasks)
    check_timeline(tasks, tl)
    assert tl.makespan >= max(tl.busy(s) for s in tl.streams)
    assert 0.0 <= tl.idle_fraction() <= 1.0


# Schedules against torch


def torch_step_order(kind: str, p: int, m: int) -> dict[int, list[Action]]:
    """The order torch's own ``_step_microbatches`` loop runs, recorded through a stand-in stage."""
    order = {}
    for r in range(p):
        ran: list[Action] = []
        stage = SimpleNamespace(
            num_stages=p, stage_index=r, is_first=r == 0, is_last=False, has_backward=True,
            get_fwd_recv_ops=lambda i: [], get_fwd_send_ops=lambda i: [],
            get_bwd_recv_ops=lambda i: [], get_bwd_send_ops=lambda i: [], perform_reduce_grad=lambda n: None,
            forward_one_chunk=lambda i, *a, r=r, ran=ran, **k: ran.append(Action(r, "F", i)),
            backward_one_chunk=lambda i, r=r, ran=ran, **k: ran.append(Action(r, "B", i)),
        )
        sched = (ts.ScheduleGPipe if kind == "gpipe" else ts.Schedule1F1B)(stage, m)
        sched._initialize_stage = lambda *a, **k: None
        sched._step_microbatches([()] * m, [{}] * m)
        order[r] = ran
    return order


def test_action_str_and_small_orders_written_out() -> None:
    assert str(Action(0, "F", 3)) == "0F3"
    one = schedule("1f1b", 3, 4)
    assert [str(a) for a in one[0]] == "0F0 0F1 0F2 0B0 0F3 0B1 0B2 0B3".split()
    assert [str(a) for a in one[2]] == "2F0 2B0 2F1 2B1 2F2 2B2 2F3 2B3".split()
    inter = schedule("interleaved", 2, 4, 2)
    assert [str(a) for a in inter[0]] == "0F0 0F1 2F0 2F1 0F2 2B0 0F3 2B1 2F2 0B0 2F3 0B1 2B2 2B3 0B2 0B3".split()


@pytest.mark.parametrize("kind", KINDS)
def test_schedule_matches_torch_pipeline_order(kind: str) -> None:
    for p, m in GRID:
        for v in CHUNKS if kind == "interleaved" else (1,):
            if not valid(kind, p, m, v):
                with pytest.raises(LabkitError, match="torch refuses"):
                    torch_order(kind, p, m, v)
                continue
            ours, theirs = schedule(kind, p, m, v), torch_order(kind, p, m, v)
            if kind == "1f1b":
                # torch 2.13's Schedule1F1B._get_pipeline_order numbers the last rank's forwards 1..m
                last = theirs.pop(p - 1)
                assert [a.microbatch for a in last if a.phase == "F"] == list(range(1, m + 1))
                assert [(a.stage, a.phase) for a in last] == [(a.stage, a.phase) for a in ours.pop(p - 1)]
            assert ours == theirs, (kind, p, m, v)


@pytest.mark.parametrize("kind", ["gpipe", "1f1b"])
def test_schedule_matches_the_loop_torch_runs(kind: str) -> None:
    for p, m in GRID:
        if valid(kind, p, m):
            assert schedule(kind, p, m) == torch_step_order(kind, p, m), (p, m)


def test_interleaved_matches_torchs_lowered_program() -> None:
    """The runtime executes pipeline_order_with_comms; its compute actions keep the same order."""
    for p, m, v in [(2, 4, 2), (3, 5, 3), (4, 8, 2), (4, 3, 2)]:
        stages = [SimpleNamespace(num_stages=p * v, group_size=p, group_rank=0, stage_index=k * p,
                                  stage_index_to_group_rank=None) for k in range(v)]
        sched = ts.ScheduleInterleaved1F1B(stages, m)
        phase = {ts._ComputationType.FORWARD: "F", ts._ComputationType.FULL_BACKWARD: "B"}
        lowered = {r: [Action(a.stage_index, phase[a.computation_type], a.microbatch_index)
                       for a in acts if a.computation_type in phase]
                   for r, acts in sched.pipeline_order_with_comms.items()}
        assert lowered == schedule("interleaved", p, m, v)


def test_schedule_rejects_what_torch_rejects() -> None:
    with pytest.raises(LabkitError, match="kind must be one of gpipe, 1f1b, interleaved"):
        schedule("pipedream", 2, 4)
    with pytest.raises(LabkitError, match="Schedule1F1B requires"):
        schedule("1f1b", 4, 3)
    with pytest.raises(LabkitError, match=r"max\(1, m // p\) = 2.*ScheduleInterleaved1F1B"):
        schedule("interleaved", 4, 9, 2)
    with pytest.raises(LabkitError, match="must be >= 2"):
        schedule("interleaved", 4, 8, 1)
    with pytest.raises(LabkitError, match="must be 1 for kind='gpipe'"):
        schedule("gpipe", 4, 8, 2)
    with pytest.raises(LabkitError, match="p must be a positive integer"):
        schedule("gpipe", 0, 8)


# Bubbles, makespans, memory


@pytest.mark.parametrize("kind", ["gpipe", "1f1b"])
@pytest.mark.parametrize("t_bwd", [1.0, 2.0])
def test_bubble_equals_gpipe_formula(kind: str, t_bwd: float) -> None:
    for p in range(1, 7):
        for m in range(1, 13):
            if valid(kind, p, m):
                tl = simulate_pipeline(kind, p, m, 1.0, t_bwd)
                assert abs(measured_bubble(tl) - bubble_fraction(p, m)) < 1e-12, (p, m)
                assert tl.makespan == pytest.approx((m + p - 1) * (1.0 + t_bwd), abs=1e-12)


@pytest.mark.parametrize("v", CHUNKS)
def test_interleaved_bubble(v: int) -> None:
    """Narayanan et al.'s (p-1)/(v*m + p-1) holds exactly for torch's order whenever m >= p.

    With m < p a round is shorter than the pipeline, so each of the v-1 changes of chunk
    waits p-m more slots: the bubble is (p-1) + (v-1)*(p-m) slots of (t_f + t_b)/v.
    """
    for p in range(1, 7):
        for m in range(1, 13):
            if not valid("interleaved", p, m, v):
                continue
            for t_bwd in (1.0, 2.0):
                got = measured_bubble(simulate_pipeline("interleaved", p, m, 1.0, t_bwd, v=v))
                slots = (p - 1) + (v - 1) * max(0, p - m)
                assert abs(got - slots / (v * m + slots)) < 1e-12, (p, m, v)
                if m >= p:
                    assert abs(got - bubble_fraction(p, m, v)) < 1e-12
                elif p > 1:
                    assert got > bubble_fraction(p, m, v)


def test_formulas() -> None:
    assert bubble_fraction(4, 8) == 3 / 11 and bubble_fraction(4, 8, 2) == 3 / 19
    assert bubble_over_ideal(4, 8) == 3 / 8 and bubble_over_ideal(4, 8, 2) == 3 / 16
    f, r = bubble_fraction(5, 7, 3), bubble_over_ideal(5, 7, 3)
    assert f == pytest.approx(r / (1 + r))
    with pytest.raises(LabkitError, match="m must be a positive integer"):
        bubble_fraction(4, 0)


def test_peak_in_flight() -> None:
    for p, m in GRID:
        assert [peak_in_flight(a) for a in schedule("gpipe", p, m).values()] == [m] * p
        if valid("1f1b", p, m):
            peaks = [peak_in_flight(a) for a in schedule("1f1b", p, m).values()]
            assert peaks == [min(p - r, m) for r in range(p)]
            assert peaks == [peak_in_flight(a) for a in torch_step_order("1f1b", p, m).values()]
            assert peaks[0] == p
        for v in CHUNKS:
            if valid("interleaved", p, m, v):
                per_round = m // max(1, m // p)
                peaks = [peak_in_flight(a) for a in schedule("interleaved", p, m, v).values()]
                assert peaks == [min((v - 1) * per_round + 2 * (p - 1 - r) + 1, m * v) for r in range(p)]
                if m % p == 0 and m >= 2 * p:
                    # chunks of L/(p*v) layers: L * (1 + (p-1)/(p*v)) layers on the first rank
                    assert peaks[0] == v * p + p - 1


def test_comm_adds_two_hops_per_stage_boundary() -> None:
    tl = simulate_pipeline("gpipe", 4, 6, 1.0, 2.0, t_comm=0.25)
    assert tl.makespan == pytest.approx((6 + 3) * 3.0 + 2 * 3 * 0.25)
    assert tl.streams[:4] == [f"rank {r}" for r in range(4)]
    assert {e.kind for e in tl.events} == {"F", "B", "comm"}
    assert sum(e.kind == "comm" for e in tl.events) == 2 * 3 * 6
    assert measured_bubble(tl) > bubble_fraction(4, 6)
    wrap = simulate_pipeline("interleaved", 2, 4, 1.0, 2.0, t_comm=0.1, v=2)
    assert "link 1->0" in wrap.streams and "link 0->1" in wrap.streams
    with pytest.raises(LabkitError, match="t_comm must be >= 0"):
        simulate_pipeline("gpipe", 2, 2, 1.0, 1.0, t_comm=-1.0)
    with pytest.raises(LabkitError, match="t_fwd must be a positive number"):
        simulate_pipeline("gpipe", 2, 2, 0.0, 1.0)


@settings(max_examples=40, deadline=None)
@given(kind=st.sampled_from(KINDS), p=st.integers(1, 5), m=st.integers(1, 10), v=st.integers(2, 3),
       t_fwd=st.floats(0.01, 5), t_bwd=st.floats(0.01, 5), t_comm=st.sampled_from([0.0, 0.05, 1.0]))
def test_pipeline_properties(kind: str, p: int, m: int, v: int, t_fwd: float, t_bwd: float, t_comm: float) -> None:
    v = v if kind == "interleaved" else 1
    if not valid(kind, p, m, v):
        return
    tl = simulate_pipeline(kind, p, m, t_fwd, t_bwd, t_comm, v)
    assert tl.makespan >= m * (t_fwd + t_bwd) * (1 - 1e-12)
    assert tl.makespan >= (m + p - 1) * (t_fwd + t_bwd) / v * (1 - 1e-12)
    end = {(e.meta["stage"], e.meta["phase"], e.meta["microbatch"]): e for e in tl.events if e.kind != "comm"}
    assert len(end) == 2 * p * v * m
    for (s, phase, i), e in end.items():
        if phase == "F" and s > 0:
            assert e.start >= end[s - 1, "F", i].end + t_comm - 1e-9
        if phase == "B":
            assert e.start >= end[s, "F", i].end - 1e-9
            if s < p * v - 1:
                assert e.start >= end[s + 1, "B", i].end + t_comm - 1e-9
    for stream in tl.streams:
        on = tl.on(stream)
        assert all(a.end <= b.start + 1e-12 for a, b in zip(on, on[1:], strict=False))


# The figure


def test_gantt_draws_one_bar_per_event() -> None:
    tl = simulate_pipeline("interleaved", 2, 4, 1e-3, 2e-3, t_comm=1e-4, v=2)
    fig = gantt(tl, title="interleaved", time_unit="ms")
    assert isinstance(fig, Figure)
    ax = fig.axes[0]
    assert sum(len(c.get_paths()) for c in ax.collections) == len(tl.events)
    assert [t.get_text() for t in ax.get_yticklabels()] == tl.streams
    assert ax.get_xlabel() == "time (ms)"
    assert any(t.get_text() == "3" for t in ax.texts)
    with pytest.raises(LabkitError, match="time_unit must be one of s, ms, us"):
        gantt(tl, time_unit="h")


def test_replay_schedule_with_equal_durations_is_simulate_pipeline() -> None:
    from labkit.sim import replay_schedule

    for kind, v in (("gpipe", 1), ("1f1b", 1), ("interleaved", 2)):
        order = schedule(kind, 2, 4, v)
        durations = {a: (1.0 if a.phase == "F" else 2.0) / v for acts in order.values() for a in acts}
        a, b = replay_schedule(order, 2 * v, durations, 0.5), simulate_pipeline(kind, 2, 4, 1.0, 2.0, 0.5, v)
        assert [(e.name, e.start, e.end) for e in a.events] == [(e.name, e.start, e.end) for e in b.events]
