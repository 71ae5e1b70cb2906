"""predict.offload_model: the one source of the offload strategies' bytes, and the modules that must agree with it."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from labkit.errors import LabkitError
from labkit.predict import offload_model as om


def test_published_figures() -> None:
    assert om.ZERO3.gpu_bytes_per_param(1) == 16  # ZeRO's 2 + 2 + 12
    assert om.ZERO_OFFLOAD.gpu_bytes_per_param(8) == 2  # parameters not partitioned in ZeRO-2
    assert om.ZERO3_CPU_OFFLOAD.gpu_bytes_per_param(8) == 2 / 8
    assert om.ZERO_OFFLOAD.host_bytes_per_param == om.ZERO3_CPU_OFFLOAD.host_bytes_per_param == 14
    assert om.ZERO_OFFLOAD.link_bytes_per_param() == 4  # 2 Psi down + 2 Psi up (Ren et al., section 4)
    assert om.ZERO_INFINITY.nvme_bytes_per_param == 20  # Rajbhandari et al. 2021, section 3
    assert om.ZERO_INFINITY.nvme_read_bytes_per_param() == 22
    assert om.ZERO_INFINITY.nvme_write_bytes_per_param() == 18
    assert om.ZERO_INFINITY.link_bytes_per_param() == 8  # section 4.1: 4 movements of 16-bit values
    assert om.ZERO_INFINITY_LAB.nvme_bytes_per_param == 14
    assert om.ZERO3.step_bytes_per_param() == 28


def test_paper_minus_lab_is_the_gradient_terms() -> None:
    assert dict(om.difference(om.ZERO_INFINITY, om.ZERO_INFINITY_LAB, "nvme")) == {om.G16: 2, om.G32: 4}
    reads = dict(om.difference(om.ZERO_INFINITY, om.ZERO_INFINITY_LAB, "nvme_read", block_fraction=1.0))
    assert reads == {f"{om.P16} for recompute": 2, om.G32: 4}


@given(dp=st.integers(1, 4096), f=st.floats(0.0, 1.0))
def test_sharding_and_block_fraction(dp: int, f: float) -> None:
    for m in om.MODELS.values():
        sharded = sum(t.bytes_per_param for t in m.gpu if t.sharded)
        full = sum(t.bytes_per_param for t in m.gpu if not t.sharded)
        assert m.gpu_bytes_per_param(dp) == pytest.approx(full + sharded / dp)
    lab = om.ZERO_INFINITY_LAB
    assert lab.nvme_read_bytes_per_param(f) == pytest.approx(14 + 2 * f)
    assert lab.nvme_write_bytes_per_param(f) == 14
    assert om.ZERO_INFINITY.nvme_read_bytes_per_param(f) >= lab.nvme_read_bytes_per_param(f)


def test_bad_input_names_the_field() -> None:
    with pytest.raises(LabkitError, match="name must be one of"):
        om.model("dram")
    with pytest.raises(LabkitError, match="where must be one of"):
        om.ZERO3.terms("disk")
    with pytest.raises(LabkitError, match="dp must be a positive integer"):
        om.ZERO3.gpu_bytes_per_param(0)
    with pytest.raises(LabkitError, match="block_fraction"):
        om.ZERO_INFINITY_LAB.nvme_read_bytes_per_param(1.5)
    with pytest.raises(LabkitError, match="bytes_per_param"):
        om.Term("x", -1, "negative")
    assert om.working_bytes(1000, tp=2) == 2 * 2 * 1000 / 2


def test_offload_modules_use_it() -> None:
    from labkit.offload import budget, infinity_scale, zero_infinity, zero_offload

    p, pb = 1_000_000, 800_000
    io = zero_infinity.io_bytes_per_step(p, pb)
    lab = om.ZERO_INFINITY_LAB
    assert io["read"] == pytest.approx(lab.nvme_read_bytes_per_param(pb / p) * p)
    assert io["write"] == lab.nvme_write_bytes_per_param() * p
    assert infinity_scale.dgx2_fit().bytes_per_param == om.ZERO_INFINITY.nvme_bytes_per_param
    assert zero_offload.offload_bytes_per_step(p) == om.ZERO_OFFLOAD.link_bytes_per_param() * p
    assert zero_offload.ADAM_BYTES_PER_PARAM == om.ZERO_OFFLOAD.step_bytes_per_param()
    assert budget.BYTES_PER_PARAM == om.ZERO3.gpu_bytes_per_param(1)


SWITCH = ("{module} must map its offload strategies to predict.offload_model (OFFLOAD_MODELS) and take its bytes "
          "from there; until it does, this module and labkit.offload disagree (issue 14)")


def test_economics_agrees() -> None:
    from labkit.economics import strategies
    from labkit.shapes import model_shape

    models = getattr(strategies, "OFFLOAD_MODELS", None)
    assert isinstance(models, dict), SWITCH.format(module="labkit.economics.strategies")
    shape, n = model_shape("llama2-7b"), 8
    psi = shape.params
    base = strategies.plan("hbm", shape, "H100-SXM", gpus=n)
    assert models["hbm"] is om.ZERO3
    for name in ("dram-offload", "ssd-offload"):
        m = models[name]
        assert isinstance(m, om.OffloadModel), SWITCH.format(module="labkit.economics.strategies")
        p = strategies.plan(name, shape, "H100-SXM", gpus=n)
        gpu = om.working_bytes(shape.params_per_layer) if m.streams_layers else m.gpu_bytes_per_param(n) * psi
        assert p.per_gpu_bytes - base.per_gpu_bytes == pytest.approx(gpu - om.ZERO3.gpu_bytes_per_param(n) * psi)
        assert p.traffic.link == m.link_bytes_per_param()
        assert p.traffic.nvme_read == m.nvme_read_bytes_per_param()
        assert p.traffic.nvme_write == m.nvme_write_bytes_per_param()
    assert models["ssd-offload"] is om.ZERO_INFINITY, "ZeRO-Infinity's NVMe bytes: the paper's (offload_model)"


def test_advisor_agrees() -> None:
    from labkit.advisor import costing, footprint
    from labkit.shapes import model_shape

    models = getattr(costing, "OFFLOAD_MODELS", None)
    assert isinstance(models, dict), SWITCH.format(module="labkit.advisor.costing")
    shape, n = model_shape("llama2-7b"), 8
    psi, seq = shape.params, shape.seq
    mc = costing.machine("H100-SXM", n)
    for name in ("dram", "nvme"):
        m = models[name]
        lay = costing.Layout(dp=n, tp=1, pp=1, zero_stage=m.zero_stage, offload=name)
        mem = footprint.memory(shape, seq, lay, 1)
        gpu = om.working_bytes(shape.params_per_layer) if m.streams_layers else m.gpu_bytes_per_param(n) * psi
        assert mem["parameters"] == pytest.approx(gpu)
        assert mem["dram"] == pytest.approx(m.host_bytes_per_param * psi / n)
        assert mem["nvme"] == pytest.approx(m.nvme_bytes_per_param * psi / n)
        t = costing.step_times(shape, seq, n, lay, mc)  # one micro-batch per GPU: nothing streamed again
        assert t["pcie_bytes"] == pytest.approx(m.link_bytes_per_param() * psi / n)
        assert t["nvme_read"] == pytest.approx(m.nvme_read_bytes_per_param() * psi / n)
        assert t["nvme_write"] == pytest.approx(m.nvme_write_bytes_per_param() * psi / n)
    assert models["nvme"] is om.ZERO_INFINITY, "ZeRO-Infinity's NVMe bytes: the paper's (offload_model)"


def test_same_name_same_bytes_everywhere() -> None:
    """The strategies the advisor and economics both name are one model; distinct ones have distinct names."""
    from labkit.advisor import costing
    from labkit.economics import strategies

    econ, adv = getattr(strategies, "OFFLOAD_MODELS", None), getattr(costing, "OFFLOAD_MODELS", None)
    assert isinstance(econ, dict) and isinstance(adv, dict), SWITCH.format(module="economics and advisor")
    for table in (econ, adv):
        for m in table.values():
            assert om.MODELS[m.name] is m
    assert econ["ssd-offload"] is adv["nvme"]
