"""Issue 29: an eager layer's host time in bare ops (``labkit.measure.host_time``) and how the eager profile prices
it (``eager_ops.host_bare_ops`` x the host's bare op). The figures themselves are printed by ``labkit bench`` beside
the stored ones, not asserted: a timing on a shared machine is not a test."""

from __future__ import annotations

import pytest

from labkit.predict import eager_ops, profiles
from labkit.predict.eager_elementwise import Precision
from labkit.shapes.hf_config import shape_from_hf_config

LAB = Precision(2, autocast=False, dropout=False)


def test_the_measurement_runs_and_returns_positive_figures() -> None:
    pytest.importorskip("transformers")
    from labkit.measure.host_time import layer_host_ops, tiny_gpt_step_ops

    r = layer_host_ops("qwen2", LAB, rounds=1, calls=300)
    assert r["forward"] > 0 and r["backward"] > 0 and r["bare_op_s"] > 0
    s = tiny_gpt_step_ops(rounds=1, calls=300)
    assert s["ops"] > 0 and s["step_s"] > 0


@pytest.mark.parametrize(("model", "key"), [("tinyllama-1.1b", ("llama", 4, True)), ("qwen2-1.5b", ("qwen2", 2, True)),
                                            ("gpt2-medium", ("gpt2", 4, True))])
def test_each_eager_set_reads_its_own_measured_figures(model: str, key: tuple) -> None:
    shape = shape_from_hf_config(model)
    assert eager_ops.family(shape) == key[0]
    assert eager_ops.host_bare_ops(shape) == eager_ops.HOST_BARE_OPS[key]
    assert eager_ops.host_bare_ops(shape, LAB) == eager_ops.HOST_BARE_OPS[(key[0], 2, False)]


def test_an_unmeasured_precision_scales_the_familys_bare_ops_per_counted_op() -> None:
    shape = shape_from_hf_config("mistral-7b")  # a Llama layer with bf16 weights under autocast: not measured
    prec = Precision(2, autocast=True)
    ops = eager_ops.layer_ops(shape, prec)
    rates = [(f / eager_ops.layer_ops(shape, Precision(w, a, dropout=a)).forward)
             for (fam, w, a), (f, _) in eager_ops.HOST_BARE_OPS.items() if fam == "llama"]
    assert eager_ops.host_bare_ops(shape, prec)[0] == pytest.approx(ops.forward * sum(rates) / len(rates))


def test_the_profile_prices_a_pass_at_its_bare_ops_times_the_bare_op_or_a_calibrations() -> None:
    shape = shape_from_hf_config("gpt2-medium")
    fwd, bwd = eager_ops.HOST_BARE_OPS[("gpt2", 4, True)]
    kw = profiles.profile("eager").layer_kwargs(shape)
    assert kw["dispatch_s"] == pytest.approx(fwd * profiles.EAGER_BARE_OP_S)
    assert kw["backward_dispatch_s"] == pytest.approx(bwd * profiles.EAGER_BARE_OP_S)
    assert kw["launch_s"] == pytest.approx(eager_ops.layer_ops(shape).forward * 4e-6)  # the GPU's gap per counted op
    cal = profiles.profile("eager").measured_launch(3e-6).layer_kwargs(shape)
    assert cal["dispatch_s"] == pytest.approx(fwd * 3e-6) and cal["backward_dispatch_s"] == pytest.approx(bwd * 3e-6)
