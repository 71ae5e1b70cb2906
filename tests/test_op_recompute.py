"""torchtitan's op-level selective recompute ("op"): its re-run FLOPs measured on a tiny Llama block under torch's
selective checkpointing with the same policy, its kept bytes and re-run bytes by hand count, and every place that
takes a recompute mode accepting it or refusing it by name."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts
from torch.utils.flop_counter import FlopCounterMode

from labkit.advisor.costing import Layout
from labkit.errors import LabkitError
from labkit.hardware import gpu
from labkit.predict import compute, op_recompute
from labkit.predict.estimate import activation_bytes_per_layer, training_flops
from labkit.shapes import ModelShape, model_shape

TINY = ModelShape("tiny-llama", 1, 64, 4, 128, 32, gated=True, ffn=96, kv_heads=2, dropout=False)


class Block(nn.Module):
    """A Llama block in torchtitan's order (wq, wk, wv, wo; w1, w3, w2), RMSNorm and rotary left out: they hold
    no matmul, and the measurement here is of the matmuls the policy re-runs."""

    def __init__(self, s: ModelShape) -> None:
        super().__init__()
        h, kv, f = s.hidden, s.kv_hidden, s.ffn_size
        self.heads, self.kv_heads, self.d = s.heads, s.kv_heads or s.heads, h // s.heads
        self.wq, self.wk, self.wv = nn.Linear(h, h, bias=False), nn.Linear(h, kv, bias=False), nn.Linear(h, kv, False)
        self.wo = nn.Linear(h, h, bias=False)
        self.w1, self.w3, self.w2 = nn.Linear(h, f, bias=False), nn.Linear(h, f, bias=False), nn.Linear(f, h, False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        q = self.wq(x).view(b, s, self.heads, self.d).transpose(1, 2)
        k = self.wk(x).view(b, s, self.kv_heads, self.d).transpose(1, 2)
        v = self.wv(x).view(b, s, self.kv_heads, self.d).transpose(1, 2)
        rep = self.heads // self.kv_heads
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, s, -1)
        h = x + self.wo(o)
        return h + self.w2(F.silu(self.w1(h)) * self.w3(h))


SAVE = {torch.ops.aten.mm.default, torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default,
        torch.ops.aten._scaled_dot_product_efficient_attention.default,
        torch.ops.aten._scaled_dot_product_flash_attention.default}


def _op_policy() -> object:
    """The policy as torchtitan states it: save the save list's outputs except every second mm of the region."""
    count: dict[str, int] = defaultdict(int)

    def policy(ctx: object, func: object, *args: object, **kwargs: object) -> CheckpointPolicy:
        key = "recompute" if ctx.is_recompute else "forward"
        if func == torch.ops.aten.mm.default:
            count[key] += 1
        keep = func in SAVE and not (func == torch.ops.aten.mm.default and count[key] % 2 == 0)
        return CheckpointPolicy.MUST_SAVE if keep else CheckpointPolicy.PREFER_RECOMPUTE

    return create_selective_checkpoint_contexts(policy)


def _step_flops(block: Block, x: torch.Tensor, op: bool) -> int:
    with FlopCounterMode(display=False) as counter:
        y = checkpoint(block, x, use_reentrant=False, context_fn=_op_policy) if op else block(x)
        y.sum().backward()
    return counter.get_total_flops()


@pytest.mark.parametrize("b, s", [(2, 16), (1, 24)])
def test_measured_rerun_flops_match_every_second_matmul(b: int, s: int) -> None:
    torch.manual_seed(0)
    block, x = Block(TINY), torch.randn(b, s, TINY.hidden, requires_grad=True)
    extra = _step_flops(block, x, op=True) - _step_flops(block, x, op=False)
    assert extra == op_recompute.extra_flops_per_layer(TINY, s, b) > 0
    h, kv, f = TINY.hidden, TINY.kv_hidden, TINY.ffn_size
    assert extra == 2 * b * s * h * (kv + h + f)  # wk, wo, w3


def test_llama_8b_reruns_wk_wo_w3_and_the_flops_reach_training_flops() -> None:
    shape = model_shape("llama3-8b")
    assert [n for n, *_ in op_recompute.rerun_matmuls(shape, 1)] == ["wk", "wo", "w3"]
    s, b = 8192, 2
    per_layer = 2 * b * s * 4096 * (1024 + 4096 + 14336)
    assert training_flops(shape, s, b, "op") - training_flops(shape, s, b) == pytest.approx(32 * per_layer)
    gpt = ModelShape("gpt", 2, 64, 4, 128, 32)  # no gate: q, k, v, o, fc1, fc2
    assert [n for n, *_ in op_recompute.rerun_matmuls(gpt, 1)] == ["wk", "wo", "fc2"]


def test_kept_bytes_by_hand_count() -> None:
    shape, s, b = model_shape("llama3-8b"), 8192, 2
    sbh = s * b * 4096
    # input, wq, wv (kv = h/4), SDPA output, w1 (f = 3.5 h), w2 at 2 bytes; fp32 log-sum-exp per row and head
    hand = 2 * sbh * (1 + 1 + 0.25 + 1 + 3.5 + 1) + 4 * 32 * s * b
    assert activation_bytes_per_layer(shape, s, b, recompute="op", attention="fused") == hand
    assert hand < activation_bytes_per_layer(shape, s, b, recompute="selective", attention="fused")
    t = 8  # sequence parallel: input and the two reduce-scatters split t ways; w2's partial sums whole
    sp = 2 * (sbh / t + sbh / t + sbh * 0.25 / t + sbh / t + sbh * 3.5 / t + sbh + 2 * sbh / t) + 4 * 32 * s * b / t
    assert activation_bytes_per_layer(shape, s, b, tp=t, sp=True, recompute="op", attention="fused") == sp
    with pytest.raises(LabkitError, match="recompute 'op' needs attention fused"):
        activation_bytes_per_layer(shape, s, b, recompute="op", attention="explicit")


def test_rerun_elementwise_bytes_by_hand_count() -> None:
    shape, rows = model_shape("llama3-8b"), 100
    h, kv, f = 4096, 1024, 14336
    # 2 RMSNorms (36 B an element at bf16), rotary on q and k (20), repeat_kv of k and v, the attention output's
    # copy (4), the residual add (6), SiLU and the gate product (10 on the MLP hidden)
    hand = rows * (2 * 36 * h + 20 * (h + kv) + 4 * (kv + h) + 4 * h + 6 * h + 10 * f)
    assert op_recompute.rerun_elementwise_bytes(shape, rows) == hand


def test_op_costs_its_rerun_in_stage_seconds() -> None:
    shape, dev = replace(model_shape("llama3-8b"), seq=8192), gpu("H100-HBM2e-96GB")
    st = {r: compute.stage_seconds(shape, 8192, 2, 1, 1, dev, flash=True, recompute=r)
          for r in ("none", "op", "full")}
    assert 0 < st["op"]["recompute"] < st["full"]["recompute"]
    assert st["op"]["forward"] == st["none"]["forward"] and st["none"]["recompute"] == 0
    with pytest.raises(LabkitError, match="recompute must be one of none, selective, full, op"):
        compute.stage_seconds(shape, 8192, 2, 1, 1, dev, recompute="ops")


def test_layouts_take_op_only_with_fused_attention_and_the_search_does_not_try_it() -> None:
    from labkit.advisor import search

    assert Layout(8, 1, 1, 2, 3, "op").label.endswith("recompute op")
    with pytest.raises(LabkitError, match="recompute 'op' needs attention fused"):
        Layout(8, 1, 1, 2, 3, "op", attention="explicit")
    assert "op" not in search.SEARCHED_RECOMPUTE and {o[1] for o in search._options(("op",))} == {"op"}


def test_the_search_around_an_op_plan_keeps_its_fused_attention() -> None:
    from labkit.advisor import refine

    shape = model_shape("llama3-8b")
    variants = refine.variants(shape, Layout(8, 1, 1, 2, 3, "op"), {})
    assert all(v.attention == "fused" for v in variants)  # tp = pp = 1: nothing else to vary, so none
    assert "explicit" in {v.attention for v in refine.variants(shape, Layout(8, 1, 1, 2, 3, "selective"), {})}
