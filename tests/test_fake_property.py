"""The predictor judged against full measurements: hypothesis draws shapes, fake tensors measure them.

Each drawn case is a whole model (1-3 layers, width 64 or 128, vocabularies from 64 to 4,096, batch, sequence,
LoRA rank, targets and recompute) trained or fine-tuned for one step under ``FakeTensorMode``
(``labkit.measure.fake_full``, byte-identical to real tensors: ``tests/test_fake_equivalence.py``). Every
category must equal its prediction to the byte, and the whole-step peak and the backward's and the optimizer's
phase peaks must be within 1% of ``labkit.predict.step_peak`` (training) or ``finetune_peak`` (LoRA). Small
widths and vocabularies are where the in-layer moments (``labkit.predict.peak_moments``) decide the peak.

Domain, stated: GPT-2, Llama and Qwen2 (micro-batch 1 and 2), 1-3 layers, an MLP at least twice the width (every
shipped model's is 2.7-4x), fp32 and bf16-mixed, no dropout, sdpa,
at least 16 tokens a batch (below that the step's sub-kilobyte tensors, a LayerNorm's mean and rstd, the position
ids, reach 1%); training; LoRA on GPT-2's four matrices without recompute (a 1-layer model's with an attention
matrix among them) or on its attention's with gradient checkpointing, and on Llama's and Qwen2's attention
matrices without it. The peak model before this domain was widened (a one-layer GPT-2's layer input, held by
``GPT2Model.forward`` and saved by nothing, left out of the forward's moment; Llama's forward moment with no
in-layer transients; the recomputed first layer counted without its first norm, though
``enable_input_require_grads`` makes its input need a gradient) fails it: hypothesis's first find was a 1-layer
GPT-2 (width 64, 2 heads, MLP 128, vocabulary 64, LoRA r=1 on qkv, fp32, batch 1, 16 tokens), predicted
256,584 B against 260,936 B measured (-1.67%; now 260,680 B, -0.10%); by hand, a 1-layer GPT-2 with recompute was
2.4% low, a Llama's forward-phase peak 2.5-4.5% low without recompute and 10-17% with it, a GPT-2 with a down
adapter's backward 1-2% high, and full training's backward phase 7.7-8% low on one layer (the backward's end:
a tied embedding's two gradients before their sum; Llama's first RMSNorm backward).

Not yet claimed (measured on 50-70 drawn cases each, the moments as they stand): QLoRA (without recompute
GPT-2 up to +4.9%, Llama/Qwen2 -2.0% to 0; with recompute -8.6% to +15%), recompute for Llama and Qwen2 (-6.8%
to +3.1%: the recomputed layer's attention), MLP targets of Llama and Qwen2 (up to +4.7%; ``up`` alone also
misses the activations category, ``labkit.predict.finetune``), MLP targets under recompute (-2.5% to +3.1%), a
1-layer GPT-2 with MLP adapters only (``up`` -1.8%, ``down`` -7.3%: nothing before them needs a gradient, so the
residual and gelu_new's chain are temporaries), an MLP narrower than 2h (at f = h the QKV projection's backward,
its 3h-wide weight gradient beside the split's gradient, outgrows the MLP's moment, which is the one modelled: a
1-layer GPT-2, h = f = 128, vocabulary 64, fp32, batch 1, 64 tokens, has its backward phase predicted 2,019,392 B
against 2,056,776 B measured, -1.8%). The forward phase's peak is not asserted: inside this domain,
where it is not the step's peak, it is still up to 2.4% low (the moment at the output layer, or Llama's at its
final norm), more under recompute. Cost: 200 examples, about 0.45 s each, 75-110 s on 2 shared cores.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from labkit.measure.fake_full import measure_full
from labkit.predict.finetune import Finetune
from labkit.shapes.hf_models import small_spec

ATTENTION = {"gpt2": ["qkv", "o"], "llama": ["q", "k", "v", "o"], "qwen2": ["q", "k", "v", "o"]}


@st.composite
def cases(draw):
    family = draw(st.sampled_from(["gpt2", "llama", "qwen2"]))
    heads = draw(st.sampled_from([2, 4]))
    hidden = draw(st.sampled_from([64, 128]))
    ffn = draw(st.sampled_from([f for f in (128, 256, 320) if f >= 2 * hidden]))  # not claimed below 2h
    kw = {"layers": draw(st.integers(1, 3)), "hidden": hidden, "heads": heads, "ffn": ffn,
          "vocab": draw(st.sampled_from([64, 96, 256, 1024, 4096])), "positions": 64}
    if family != "gpt2":
        kw["kv_heads"] = draw(st.sampled_from([1, 2, heads]))
    batch, seq = draw(st.integers(1, 2)), draw(st.sampled_from([16, 32, 64]))
    precision = draw(st.sampled_from(["fp32", "bf16-mixed"]))
    ft = None
    if draw(st.booleans()):
        # GPT-2: recompute, or the MLP's matrices too; Llama and Qwen2: the attention's, no recompute
        checkpointing = family == "gpt2" and draw(st.booleans())
        allowed = ATTENTION[family] + (["up", "down"] if family == "gpt2" and not checkpointing else [])
        targets = tuple(draw(st.lists(st.sampled_from(allowed), min_size=1, max_size=len(allowed), unique=True)))
        if kw["layers"] == 1 and not set(targets) & set(ATTENTION[family]):
            targets = (ATTENTION[family][0], *targets)  # a 1-layer model's MLP-only adapters are not claimed
        ft = Finetune("lora", draw(st.sampled_from([1, 4, 8])), targets, checkpointing=checkpointing)
    return small_spec(family, **kw), batch, seq, precision, ft


@settings(max_examples=200, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_every_category_to_the_byte_and_the_peaks_within_one_percent(case):
    spec, batch, seq, precision, ft = case
    r = measure_full(spec, batch, seq, precision, dropout=0.0, finetune=ft, progress=lambda s: None)
    for name, (measured, predicted) in r.categories.items():
        assert measured == predicted, name
    assert r.peak["predicted"] == pytest.approx(r.peak["measured"], rel=0.01)
    by = r.peak["by_phase"]
    for phase in ("backward", "optimizer"):
        assert by["predicted"][phase] == pytest.approx(by["measured"][phase], rel=0.01), phase
