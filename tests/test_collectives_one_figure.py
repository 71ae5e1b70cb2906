"""Every path to "a collective of N bytes over g GPUs on a link" returns ``labkit.predict.collectives``' figure.

Notebooks 02 (``inter_layer.scale``), 03 (``intra_layer.costs``), 07 (``economics.strategies``) and 09
(``advisor.steptime``) each price collectives; this test asks each for the same all-reduce (or, where a
path prices ZeRO-3's two all-gathers and a reduce-scatter, for that) and checks it equals the one cost
model's, exactly, on NVLink and between nodes, at NCCL's bus bandwidth and in the textbook form.
Notebook 04 prices no collective: its offload paths move bytes over PCIe (``hardware.transfer_time``).
"""

from __future__ import annotations

import pytest

from labkit import hardware
from labkit.advisor import steptime
from labkit.advisor.costing import Layout
from labkit.economics import strategies
from labkit.inter_layer.scale import zero_step_seconds
from labkit.intra_layer.costs.modes import comm_seconds
from labkit.intra_layer.costs.ops import Collective, cost
from labkit.predict import collectives as coll
from labkit.predict.profiles import PROFILES
from labkit.shapes import model_shape

LINKS = ["nvlink3", "ib-hdr"]


@pytest.mark.parametrize("name", LINKS)
@pytest.mark.parametrize(("nbytes", "group"), [(2 * 1.3e9, 8), (4096.0, 2), (1e9, 64)])
def test_one_all_reduce_is_the_same_figure_on_every_path(name: str, nbytes: float, group: int) -> None:
    link = hardware.link(name)
    ref = coll.all_reduce(nbytes, group, link)
    assert ref > 0
    # 02: ZeRO-0's gradient all-reduce (params x element bytes)
    assert zero_step_seconds(nbytes / 2, group, 0, link, elem_bytes=2) == ref
    # 03: one tensor-parallel collective, and the 1D MLP block's forward (one all-reduce of Y)
    assert Collective("all_reduce", group, int(nbytes)).seconds(link) == coll.all_reduce(int(nbytes), group, link)
    # 09: data-parallel all-reduce with no overlap (megatron-2021), and a tensor-parallel layer's four
    lay = Layout(group, 1, 2)  # pp > 1: the gradient all-reduce waits for the flush
    moved, exposed = steptime.dp_seconds(nbytes / 2, lay, 1, link, 2, 2, 0.0, prof=PROFILES["megatron-2021"])
    assert exposed == ref and moved == pytest.approx(2 * (group - 1) / group * nbytes)


@pytest.mark.parametrize("form", coll.FORMS)
def test_the_form_travels_through_every_path(form: str) -> None:
    link, group, nbytes = hardware.link("nvlink3"), 8, 3.2e8
    ref = coll.all_reduce(nbytes, group, link, form)
    assert zero_step_seconds(nbytes / 2, group, 0, link, 2, form) == ref
    assert Collective("all_reduce", group, int(nbytes)).seconds(link, form) == coll.all_reduce(int(nbytes), group,
                                                                                                link, form)
    assert coll.all_reduce(nbytes, group, link, "textbook") < coll.all_reduce(nbytes, group, link, "bus")


def test_the_1d_block_and_the_advisors_tensor_parallel_all_reduces_agree() -> None:
    link, t, b, h = hardware.link("nvlink3"), 8, 4096, 1024
    block = cost("1d", t, "mlp", b, h, 4 * h, 1, 2)
    (fwd,) = block.forward
    assert fwd.kind == "all_reduce" and fwd.nbytes == b * h * 2
    assert comm_seconds("1d", t, b, h, 4 * h, link, 2, phase="forward") == coll.all_reduce(b * h * 2, t, link)
    # the advisor: 4 all-reduces of b s h per layer (2 forward, 2 backward), the same function
    shape = model_shape("gpt2")
    lay = Layout(1, t, 1, micro_batch=4)
    per_layer = steptime.tp_seconds(shape, 1024, lay, link, 2) / shape.layers
    assert per_layer == pytest.approx(4 * coll.all_reduce(2 * 4 * 1024 * shape.hidden, t, link), rel=1e-12)


def test_zero3_traffic_is_the_same_on_the_economics_and_inter_layer_paths() -> None:
    """07's ZeRO-3 peer time (two all-gathers and a reduce-scatter of 2 Psi) is 02's ZeRO-3 step traffic."""
    shape = model_shape("llama2-7b")
    p = strategies.plan("hbm", shape, "A100-80GB", gpus=8)
    link = hardware.load_catalogue().link(hardware.gpu("A100-80GB").nvlink)
    assert p.peer_s == zero_step_seconds(shape.params, 8, 3, link, elem_bytes=2)
    assert p.peer_s == pytest.approx(coll.all_reduce(2.0 * shape.params, 8, link)
                                     + coll.all_gather(2.0 * shape.params, 8, link), rel=1e-12)
