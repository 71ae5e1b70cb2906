"""One rank of an 8-rank FSDP2 and tensor-parallel layout at Llama-2-70B's widths, beside ``labkit advise``.

The step runs on torch's fake process group (one process, no peer) under fake tensors, two layers of the real
widths (the per-layer shards are those of the 80-layer model). Exact to the byte: FSDP2's parameters, gradients
and optimizer states per rank in fp32, the model states' sum under FSDP2's bf16 mixed precision (its split is
FSDP2's 4 + 4 + 8, not ZeRO's 2 + 2 + 12: tested as such), and tensor parallelism's once the replicated norms
are counted. The activations alive after forward: under FSDP, ``measure --full``'s transformers count but the
batch's ids and 12 B of scalars; under tp, a layer keeps Korthikanti et al.'s count plus transformers' RMSNorm
terms (both to the byte); against the advisor's Korthikanti count under FSDP, within 15% (stated, not exact).
The peak is bounded: ZeRO-3's prediction takes it without FSDP2's gathered working set. Each call makes and
destroys its own fake group, so no group outlives a test.
Cost: about 13 s on 2 cores, one process (six fake steps at two or one layers).
"""

from __future__ import annotations

import json
import re

import pytest

from labkit.advisor.costing import Layout
from labkit.advisor.footprint import memory
from labkit.cli import main
from labkit.errors import LabkitError
from labkit.measure.fake_build import load
from labkit.measure.fake_sharded import measure_sharded, predict_layout

SEQ = 512


def _run(layout, precision="fp32"):
    return measure_sharded("llama-2-70b", layout, 8, 1, SEQ, precision, layers=2, progress=lambda s: None)


@pytest.fixture(scope="module")
def fsdp32():
    return _run("fsdp")


@pytest.fixture(scope="module")
def tp32():
    return _run("tp")


@pytest.mark.parametrize(("layout", "lay"), [("fsdp", Layout(dp=8, tp=1, pp=1, zero_stage=3, precision="fp32")),
                                             ("tp", Layout(dp=1, tp=8, pp=1, sp=False, precision="fp32"))])
def test_prediction_is_labkit_advise_for_the_layout(layout, lay):
    spec = load("llama-2-70b", 2)
    ours, theirs = predict_layout(spec, layout, 8, 1, SEQ, "fp32"), memory(spec.shape, SEQ, lay, 1)
    for key in ("parameters", "gradients", "optimizer", "activations", "total"):
        assert ours[key] == theirs[key], key


def test_fsdp2_8_ranks_model_states_to_the_byte(fsdp32):
    c = fsdp32.categories
    for name in ("parameters", "gradients", "optimizer states", "model states"):
        assert c[name][0] == c[name][1], name
    assert c["parameters"][0] == 4 * load("llama-2-70b", 2).shape.params // 8


def test_fsdp2_peak_is_the_prediction_plus_the_gathered_working_set(fsdp32):
    """ZeRO-3's prediction has no gathered parameters; FSDP2 holds a layer's and the root's (not resharded after
    forward), the all-gather and reduce-scatter buffers: without them the measured peak is under the prediction."""
    gathered = fsdp32.categories["FSDP2 gathered working set at the peak"][0]
    assert gathered > 2 * fsdp32.categories["parameters"][0]
    assert fsdp32.peak["measured"] - gathered < fsdp32.peak["predicted"] < fsdp32.peak["measured"]
    assert sum(fsdp32.tracker_at_peak.values()) == fsdp32.peak["measured"]


def test_activations_within_the_stated_share(fsdp32):
    """transformers' layers keep more than the fused-attention count (module text): within 15% for FSDP."""
    m, p = fsdp32.categories["activations (alive after forward)"]
    assert p < m < 1.15 * p


def test_fsdp2_fp32_activations_are_measure_full_s_count(fsdp32):
    """Beside ``labkit measure --full``'s transformers-exact count: the same bytes but the batch's int64 ids, which
    FSDPMemTracker files as inputs (8 B a token), and the 12 B of scalars the count keeps beside them."""
    m, p = fsdp32.categories["activations, transformers' count (measure --full's)"]
    assert p - m == 8 * SEQ + 12


def test_fsdp2_bf16_mixed_keeps_fp32_shards_and_the_same_states():
    r = _run("fsdp", "bf16-mixed")
    c = r.categories
    assert c["model states"][0] == c["model states"][1]
    assert c["parameters"][0] == 2 * c["parameters"][1] and c["gradients"][0] == 2 * c["gradients"][1]


def test_tensor_parallel_8_ranks_to_the_byte_with_replicated_norms(tp32):
    r = tp32
    c = r.categories
    spec = load("llama-2-70b", 2)
    norms = 4 * spec.shape.hidden * (2 * spec.shape.layers + 1)
    extra = norms - norms // 8
    assert c["parameters"][0] - c["parameters"][1] == extra
    assert c["gradients"][0] - c["gradients"][1] == extra
    assert c["optimizer states"][0] - c["optimizer states"][1] == 2 * extra
    assert r.peak["phase"] == "optimizer"


def test_cli_fsdp_json(capsys):
    assert main(["measure", "--hf-config", "llama-2-70b", "--layers", "1", "--full", "--fsdp", "8", "--seq", "64",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["layout"] == "fsdp" and out["world"] == 8
    assert out["categories"]["model states"][0] == out["categories"]["model states"][1]


@pytest.mark.parametrize(("args", "says"), [
    (("tp", 3), "world must divide the model's heads (64) for tp"),
    (("fsdp", 512), "their gcd is 256"),
    (("fsdp", 1), "world must be between 2"),
    (("pp", 8), "cannot be traced on one fake rank"),
    (("zero", 8), "layout must be one of"),
])
def test_bad_layout_is_one_line(args, says):
    with pytest.raises(LabkitError, match=re.escape(says)) as e:
        measure_sharded("llama-2-70b", *args, layers=1, progress=lambda s: None)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize(("argv", "says"), [
    (["--hf-config", "llama-2-70b", "--fsdp", "8"], "fsdp needs --full"),
    (["--hf-config", "llama-2-70b", "--full", "--fsdp", "8", "--tp", "8"], "cannot be given together"),
    (["--hf-config", "gpt2", "--full", "--tp", "4"], "Llama, Mistral or Qwen2"),
    (["--hf-config", "llama-2-70b", "--full", "--tp", "8", "--precision", "bf16-mixed"], "precision must be"),
    (["--full", "--tp", "8"], "tp needs --hf-config"),
])
def test_cli_bad_input_is_one_line(capsys, argv, says):
    assert main(["measure", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert says in err and "\n" not in err


def test_refuses_a_process_group_already_there():
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=2)
    try:
        with pytest.raises(LabkitError, match="already initialized"):
            measure_sharded("llama-2-70b", "fsdp", 8, layers=1, progress=lambda s: None)
    finally:
        dist.destroy_process_group()
    assert not dist.is_initialized()


def test_tensor_parallel_layer_keeps_korthikanti_plus_the_rmsnorm_terms(tp32):
    """A layer's activations per rank under tp, from 1 and 2 layers: Korthikanti et al.'s count (no sequence
    parallelism) plus what transformers' RMSNorm keeps beside its input on every rank, its normalized hidden
    (e*s*b*h) and its fp32 rsqrt (4*s*b), for each of the layer's two norms."""
    from labkit.predict.estimate import activation_bytes_per_layer

    one, two = measure_sharded("llama-2-70b", "tp", 8, 1, SEQ, "fp32", layers=1, progress=lambda s: None), tp32
    key = "activations (alive after forward)"
    per_layer = two.categories[key][0] - one.categories[key][0]
    sh = load("llama-2-70b", 1).shape
    korthikanti = activation_bytes_per_layer(sh, SEQ, 1, 4, 1, tp=8, attention="fused")
    assert two.categories[key][1] - one.categories[key][1] == korthikanti
    assert per_layer == korthikanti + 2 * (4 * SEQ * sh.hidden + 4 * SEQ)
