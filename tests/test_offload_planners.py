"""SwapAdvisor, FlashNeuron and Mobius in the simulator: invariants and search properties."""

import pytest

from labkit.errors import LabkitError
from labkit.hardware import Link, gpu
from labkit.offload import flashneuron, mobius, swapadvisor
from labkit.offload.iteration import Machine, Op, Plan, machine, simulate_iteration, transformer_ops
from labkit.shapes import model_shape

LINK = Link("test", (), "pcie", 20.0, 0.0, "test")


def test_peak_memory_hand_made():
    ops = [Op(f"o{i}", 1.0, 2.0, 10.0) for i in range(3)]
    m = Machine(100.0, 5.0, LINK)
    plain = simulate_iteration(ops, m, Plan.none(3))
    assert (plain.time_s, plain.peak_bytes, plain.bytes_moved) == (9.0, 35.0, 0.0)
    swapped = simulate_iteration(ops, m, Plan((True, False, False), (1, 1, 1)))
    ev = {e.name: (e.start, e.end) for e in swapped.timeline.events}
    assert ev["out0.0"] == (1.0, 1.5) and ev["in0.0"] == (5.0, 5.5)
    assert swapped.peak_bytes == 25.0 and swapped.bytes_moved == 20.0


def test_no_offload_no_transfer_tasks():
    ops = transformer_ops(model_shape("gpt2"), 256, 2, gpu("A100-80GB").peak_flops["bf16"])
    res = simulate_iteration(ops, machine("A100-80GB", 1e9), Plan.none(len(ops)))
    assert res.timeline.streams == ["compute"]


def test_direct_path_faster_than_bounce():
    m = machine("V100-32GB", 0.0)
    ops = [Op("x", 0.0, 0.0, 1e9)]
    times = {p: simulate_iteration(ops, m, Plan((True,), (1,), "disk", p)).time_s for p in ("direct", "bounce")}
    assert times["direct"] < times["bounce"]


def test_bad_plan_is_refused():
    with pytest.raises(LabkitError, match="ahead"):
        simulate_iteration([Op("x", 1, 1, 1)], Machine(10, 0, LINK), Plan((True,), (0,)))


@pytest.fixture(scope="module")
def pressured():
    ops = transformer_ops(model_shape("gpt2-medium"), 1024, 4, gpu("RTX-4090").peak_flops["bf16"])
    return ops, machine("RTX-4090", 6e9, capacity_bytes=16.8e9)


def test_ga_elitism_determinism_budget(pressured):
    ops, m = pressured
    a = swapadvisor.search(ops, m, seed=3)
    assert a.best.score <= a.heuristic.score
    assert all(x >= y for x, y in zip(a.history, a.history[1:], strict=False))
    assert a.heuristic.fits and a.best.fits and a.best.result.peak_bytes <= m.capacity_bytes
    assert not a.no_offload.fits
    b = swapadvisor.search(ops, m, seed=3)
    assert b.best.plan == a.best.plan and b.history == a.history


def test_flashneuron_offload_grows_batch():
    r = flashneuron.compare(model_shape("gpt2-medium"), 1024, slack=1e9)
    assert r.batch_offload > r.batch_no_offload >= 1
    assert "12.4-14.0x" in r.published


def test_mobius_moves_fewer_bytes():
    c = mobius.compare(mobius.Setup(model_shape("llama2-7b")))
    assert c["mobius_gb"] < c["zero_offload_gb"]
    with pytest.raises(LabkitError, match="stages"):
        mobius.Setup(model_shape("llama2-7b"), stages=6)
