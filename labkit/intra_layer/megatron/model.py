"""The tiny GPT split by Megatron's 1D tensor parallelism on a DTensor mesh, whole heads per rank."""

from __future__ import annotations

import torch
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import Replicate, Shard
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    PrepareModuleOutput,
    RowwiseParallel,
    SequenceParallel,
    parallelize_module,
)

from labkit.errors import require_choice, require_divides, require_positive
from labkit.rig.model import GPTConfig, SelfAttention, TinyGPT, config_from

MODEL = {"vocab_size": 64, "seq_len": 64, "n_layer": 2, "n_head": 4, "d_model": 32, "dropout": 0.0}


LR = 0.1


SAVED_SHARDS = ("attn.c_attn", "mlp.c_fc", "lm_head")  # under SP these keep 1/t of their gathered input


def model_config(model: dict | None = None) -> GPTConfig:
    """The tiny GPT used here: ``MODEL`` updated by ``model`` (explicit attention, 1-byte masks)."""
    return config_from(MODEL, model)


def check(world_size: int, cfg: GPTConfig, sp: bool, batch_size: int, tp: int = 0) -> int:
    """The tensor-parallel degree t (0 means world_size), or a LabkitError naming what t must fit."""
    require_positive("world_size", world_size)
    require_positive("batch_size", batch_size)
    t = tp or world_size
    require_choice("tp", t, (world_size,))  # one 1-D mesh over every rank
    require_divides("tp", t, "n_head", cfg.n_head)
    require_divides("tp", t, "ffn", cfg.ffn_size)
    require_divides("tp", t, "vocab_size", cfg.vocab_size)
    if sp:
        require_divides("tp", t, "seq_len", cfg.seq_len)
    return t


def qkv_rows(d_model: int, tp: int) -> torch.Tensor:
    """Row order of ``c_attn`` that puts q, k and v of rank r's heads in the r-th column shard."""
    w = d_model // tp
    return torch.cat([torch.arange(w) + j * d_model + r * w for r in range(tp) for j in range(3)])


class HeadParallelAttention(SelfAttention):
    """``SelfAttention`` on the heads ``c_attn`` returns (a/t of them), with q, k, v side by side per rank."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        qkv = self.c_attn(x)  # (b, s, 3h/t), local
        b, s, w = qkv.shape
        d = self.c_proj.out_features // self.n_head
        q, k, v = (t.view(b, s, -1, d).transpose(1, 2) for t in qkv.split(w // 3, dim=2))
        y = self.core(q, k, v).transpose(1, 2).contiguous().view(b, s, w // 3)  # (b, s, h/t)
        return self.resid_drop(self.c_proj(y))


def build(cfg: GPTConfig, mesh: DeviceMesh, sp: bool, seed: int) -> TinyGPT:
    """The seeded TinyGPT, QKV rows regrouped by rank, split over ``mesh`` (the Megatron layout)."""
    torch.manual_seed(seed)
    net, order = TinyGPT(cfg), qkv_rows(cfg.d_model, mesh.size())
    seq, rep = Shard(1), Replicate()
    act = seq if sp else rep  # the layout of the residual stream
    layer = {"attn.c_attn": ColwiseParallel(input_layouts=act), "attn.c_proj": RowwiseParallel(output_layouts=act),
             "mlp.c_fc": ColwiseParallel(input_layouts=act), "mlp.c_proj": RowwiseParallel(output_layouts=act)}
    top = {"wte": RowwiseParallel(input_layouts=rep, output_layouts=act),
           "lm_head": ColwiseParallel(input_layouts=act, output_layouts=Shard(-1), use_local_output=False)}
    if sp:
        layer |= {"ln_1": SequenceParallel(), "ln_2": SequenceParallel()}
        top |= {"ln_f": SequenceParallel(),  # wpe's (s, h) output is cut to this rank's positions: (s/t, h)
                "wpe": PrepareModuleOutput(output_layouts=rep, desired_output_layouts=Shard(0))}
    for block in net.h:
        block.attn.__class__ = HeadParallelAttention  # same parameters and names, head-aware forward
        with torch.no_grad():
            for p in (block.attn.c_attn.weight, block.attn.c_attn.bias):
                p.copy_(p[order])
        parallelize_module(block, mesh, layer)
    parallelize_module(net, mesh, top)
    net.lm_head.weight = net.wte.weight  # the two Shard(0) copies become one again
    return net
