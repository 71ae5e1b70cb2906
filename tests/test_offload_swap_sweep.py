"""The oversubscription sweep: search (several seeds) beside greedy and vDNN, all in one simulator."""

from __future__ import annotations

import math

import pytest

from labkit.errors import LabkitError
from labkit.hardware import gpu
from labkit.offload import swap_sweep
from labkit.offload.iteration import Plan, simulate_iteration, transformer_ops
from labkit.shapes import model_shape

SHAPE = model_shape("gpt2-medium")


def test_budget_leaves_one_rth_of_the_room():
    m = swap_sweep.budget(SHAPE, 1024, 4, "RTX-4090", 2.0)
    ops = transformer_ops(SHAPE, 1024, 4, gpu("RTX-4090").peak_flops["bf16"])
    peak = simulate_iteration(ops, m, Plan.none(len(ops))).peak_bytes - m.resident_bytes
    assert m.capacity_bytes - m.resident_bytes == pytest.approx(peak / 2.0)
    with pytest.raises(LabkitError, match="ratio"):
        swap_sweep.budget(SHAPE, 1024, 4, "RTX-4090", 1.0)


def test_sweep_is_deterministic_and_ordered():
    kw = dict(ratios=(1.1, 2.0), seeds=(0, 1), population=6, generations=4)
    a = swap_sweep.sweep(SHAPE, 1024, 4, **kw)
    assert a == swap_sweep.sweep(SHAPE, 1024, 4, **kw)
    assert [p.ratio for p in a] == [1.1, 2.0]
    for p in a:
        assert len(p.ga) == 2 and all(math.isfinite(g) for g in p.ga)  # seeded with vDNN's plan, which fits
        assert min(p.ga) <= p.vdnn  # elitism: never worse than the vDNN plan it starts from
        assert p.greedy <= p.vdnn
        assert sum(p.greedy_swaps.values()) >= 1 and set(p.greedy_swaps) == {"attn", "mlp"}
    assert a[1].greedy >= a[0].greedy  # less room, more to move
    with pytest.raises(LabkitError, match="seeds"):
        swap_sweep.sweep(SHAPE, 1024, 4, seeds=())
