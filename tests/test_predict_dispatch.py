"""Issue 29: eager PyTorch's host dispatch overlaps the GPU's kernels (``compute.LayerTimes``): a pass takes the slower
of the two, so a small shape is host-bound and a large one GPU-bound, and profiles without a host term are unchanged."""

from __future__ import annotations

import pytest

from labkit import hardware
from labkit.predict import compute, eager_ops, profiles
from labkit.predict.step_seconds import step_seconds
from labkit.shapes import model_shape
from labkit.shapes.hf_config import shape_from_hf_config

H200 = hardware.gpu("H200")
EAGER = profiles.profile("eager")
TINYLLAMA = shape_from_hf_config("tinyllama-1.1b")


OPS = 48, 87  # TinyLlama's ops per layer, forward and backward (fp32 weights under autocast: eager_ops)
HOST = eager_ops.HOST_BARE_OPS[("llama", 4, True)]  # its host's measured bare ops per layer, forward and backward


def _eager_layer(seq: int, batch: int, unfused: float = 0.0) -> compute.LayerTimes:
    if unfused:  # the fused kernels with extra passes, at the forward's counted launches and measured host time
        return compute.layer_times(TINYLLAMA, seq, batch, 1, H200, "bf16", False, True, OPS[0] * compute.LAUNCH_S,
                                   dispatch_s=HOST[0] * EAGER.dispatch_s, unfused_passes=unfused)
    return compute.layer_times(TINYLLAMA, seq, batch, 1, H200, "bf16", False, True, **EAGER.layer_kwargs(TINYLLAMA))


def test_a_dispatch_bound_shape_takes_the_hosts_time() -> None:
    lt = _eager_layer(16, 1)  # 16 tokens: microseconds of kernels against 145 bare ops x 9.4 us of host time
    back = HOST[1] * profiles.EAGER_BARE_OP_S  # the backward's host time, measured on its own
    assert lt.dispatch == pytest.approx(HOST[0] * 9.4e-6) and lt.backward_dispatch == pytest.approx(back)
    assert lt.kernels < lt.dispatch / 2
    assert lt.forward == pytest.approx(lt.dispatch - lt.unfused_share * lt.unfused)
    assert lt.backward == pytest.approx(back - (1 - lt.unfused_share) * lt.unfused)


def test_a_compute_bound_shape_takes_the_kernels_time_with_their_launch_gaps() -> None:
    lt = _eager_layer(4096, 8)
    assert lt.launch == pytest.approx(OPS[0] * compute.LAUNCH_S) and lt.kernels > 2 * lt.dispatch
    assert lt.backward_launch == pytest.approx(OPS[1] * compute.LAUNCH_S)
    assert lt.forward == lt.gemm + lt.attention + lt.elementwise + lt.launch
    assert lt.backward == compute.BACKWARD_FACTOR * (lt.gemm + lt.attention + lt.elementwise) + lt.backward_launch


def test_the_profiles_extra_passes_are_gpu_work_the_dispatch_overlaps() -> None:
    """With the unfused passes, each pass is max(GPU incl. its share of them, dispatch), less the share (which
    ``profiles.extra_seconds`` adds): forward + backward + the passes = the two maxima."""
    seq, batch, passes = 1024, 4, 270.0
    lt = _eager_layer(seq, batch, passes)
    unfused = compute.stream_seconds(passes * 4 * seq * batch * TINYLLAMA.hidden, H200)
    assert lt.unfused == pytest.approx(unfused)
    backward_gpu = compute.BACKWARD_FACTOR * (lt.gemm + lt.attention + lt.elementwise) + lt.launch
    assert lt.forward + lt.backward + unfused == pytest.approx(
        max(lt.kernels + unfused / 3, lt.dispatch) + max(backward_gpu + 2 * unfused / 3, lt.dispatch))
    bare = compute.layer_times(TINYLLAMA, seq, batch, 1, H200, "bf16", False, True, OPS[0] * compute.LAUNCH_S,
                               dispatch_s=HOST[0] * EAGER.dispatch_s)
    assert lt.forward + lt.backward + unfused < bare.forward + bare.backward + unfused  # partly behind the dispatch


@pytest.mark.parametrize("name", ["megatron-2021", "megatron-te", "fsdp"])
def test_profiles_without_a_host_term_price_a_layer_as_before(name: str) -> None:
    prof = profiles.profile(name)
    assert prof.dispatch_s == 0.0 and prof.launch_s == compute.LAUNCH_S
    shape = model_shape("gpt3-175b") if name == "megatron-2021" else TINYLLAMA
    for seq, batch in ((16, 1), (2048, 4)):
        lt = compute.layer_times(shape, seq, batch, 1, H200, "bf16", False, True,
                                 gemm_efficiency=prof.gemm_efficiency, **prof.layer_kwargs(shape))
        assert prof.layer_kwargs(shape) == {"launch_s": prof.launch_per_layer_s, "dispatch_s": 0.0,
                                            "unfused_passes": prof.bsh_passes}
        kernels = lt.gemm + lt.attention + lt.elementwise
        assert lt.forward == kernels + prof.launch_per_layer_s  # the sum, however small the shape
        assert lt.backward == compute.BACKWARD_FACTOR * kernels + prof.launch_per_layer_s


def test_a_calibrations_launch_replaces_the_dispatch_where_there_is_one() -> None:
    assert EAGER.measured_launch(9e-6).dispatch_s == 9e-6 and EAGER.measured_launch(9e-6).launch_s == EAGER.launch_s
    assert EAGER.measured_launch(9e-6).counted == EAGER.counted  # still the measured host bare ops
    megatron = profiles.profile("megatron-te").measured_launch(9e-6)
    assert megatron.launch_s == 9e-6 and megatron.dispatch_s == 0.0


def test_on_a_cpu_the_dispatch_adds_to_the_kernels() -> None:
    """A CPU runs the ops it dispatches: no queue to hide the host's time in (``overlapped=False``)."""
    seq, batch = 16, 1
    queued = step_seconds(TINYLLAMA, seq, batch, H200, launch_s=30e-6)
    serial = step_seconds(TINYLLAMA, seq, batch, H200, launch_s=30e-6, overlapped=False)
    lt = compute.layer_times(TINYLLAMA, seq, batch, 1, H200, "bf16", False, True, OPS[0] * 30e-6,
                             EAGER.gemm_efficiency, counted=EAGER.counted)  # counted bytes, no fused kernels
    logits = compute.logits_seconds(TINYLLAMA, seq, batch, 1, H200, "bf16", EAGER.gemm_efficiency)
    assert serial["forward"] == pytest.approx(TINYLLAMA.layers * lt.forward + logits)
    host = compute.layer_times(TINYLLAMA, seq, batch, 1, H200, "bf16", False, True,
                               gemm_efficiency=EAGER.gemm_efficiency,
                               **EAGER.measured_launch(30e-6).layer_kwargs(TINYLLAMA))
    assert host.forward == pytest.approx(host.dispatch - host.unfused * host.unfused_share)  # host-bound
    assert queued["forward"] == pytest.approx(TINYLLAMA.layers * host.forward + logits)
    # the CPU's counted launches (an OpenMP region each) add to its kernels; a GPU host's measured bare ops overlap
    assert serial["forward"] > TINYLLAMA.layers * (lt.kernels - lt.launch) + logits
