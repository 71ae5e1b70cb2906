"""The predictor judged against full measurements: hypothesis draws shapes, fake tensors measure them.

Each drawn case is a whole model (2-3 layers, width 64 or 128, vocabularies from 64 to 4,096, batch, sequence,
LoRA rank and targets) trained or fine-tuned for one step under ``FakeTensorMode`` (``labkit.measure.fake_full``,
byte-identical to real tensors: ``tests/test_fake_equivalence.py``). Every category must equal its prediction to
the byte and the whole-step peak must be within 1% of ``labkit.predict.step_peak`` (training) or
``finetune_peak`` (LoRA). Small widths and vocabularies are where the in-layer moments decide the peak. The
fine-tune peak model before this test (four b*s*f transients in GPT-2's MLP backward, two in Llama's, no final
RMSNorm moment, GPT-2's forward moment without the MLP's transients) fails it: hypothesis's first find was a
2-layer GPT-2 (width 64, MLP 128, vocabulary 64, LoRA r=1 on qkv, fp32, batch 1, 16 tokens), predicted
463,632 B against 455,696 B measured (+1.74%); by hand it missed by up to 4.4% (+5.7% with checkpointing).

Domain, stated: GPT-2 and Llama families, 2-3 layers, fp32 and bf16-mixed, no dropout, sdpa, at least 16 tokens
a batch (below that the step's sub-kilobyte tensors, a LayerNorm's mean and rstd, the position ids, reach 1%);
training, and LoRA on the attention matrices without gradient checkpointing. Not yet claimed (measured misses
of 1-12%): one-layer models' forward moment, QLoRA's forward moment, checkpointed fine-tuning's recompute moment,
MLP targets (their adapters' backward transients), Qwen2 at micro-batch 1. Cost: 200 examples, about 0.4 s
each, 50-80 s on 2 cores.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from labkit.measure.fake_full import measure_full
from labkit.predict.finetune import Finetune
from labkit.shapes.hf_models import small_spec


@st.composite
def cases(draw):
    family = draw(st.sampled_from(["gpt2", "llama"]))
    heads = draw(st.sampled_from([2, 4]))
    kw = {"layers": draw(st.integers(2, 3)), "hidden": draw(st.sampled_from([64, 128])), "heads": heads,
          "ffn": draw(st.sampled_from([128, 256, 320])), "vocab": draw(st.sampled_from([64, 96, 256, 1024, 4096])),
          "positions": 64}
    if family != "gpt2":
        kw["kv_heads"] = draw(st.sampled_from([1, 2, heads]))
    batch, seq = draw(st.integers(1, 2)), draw(st.sampled_from([16, 32, 64]))
    precision = draw(st.sampled_from(["fp32", "bf16-mixed"]))
    ft = None
    if draw(st.booleans()):
        allowed = ["qkv", "o"] if family == "gpt2" else ["q", "k", "v", "o"]
        targets = tuple(draw(st.lists(st.sampled_from(allowed), min_size=1, max_size=len(allowed), unique=True)))
        ft = Finetune("lora", draw(st.sampled_from([1, 4, 8])), targets)
    return small_spec(family, **kw), batch, seq, precision, ft


@settings(max_examples=200, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_every_category_to_the_byte_and_the_peak_within_one_percent(case):
    spec, batch, seq, precision, ft = case
    r = measure_full(spec, batch, seq, precision, dropout=0.0, finetune=ft, progress=lambda s: None)
    for name, (measured, predicted) in r.categories.items():
        assert measured == predicted, name
    assert r.peak["predicted"] == pytest.approx(r.peak["measured"], rel=0.01)
