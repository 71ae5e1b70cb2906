"""Bytes per GPU of one layout: the validated memory model, with 8-bit Adam states and offload as corrections.

``labkit.predict.estimate.estimate_memory`` (ZeRO, SC 2020; Korthikanti et al. 2022; 1F1B keeps p
micro-batches and the interleaved schedule a little more, Narayanan et al. 2021), with two changes it
does not model itself: 8-bit Adam moments (``reduction.design.optimizer_state_bytes``, Dettmers et al.,
ICLR 2022) and offload, whose bytes come from ``labkit.predict.offload_model`` (``costing.offload_model``).
Uneven pipeline stages are bounded by pricing every stage as the largest (``stages``); an FP8 layout
keeps the states of bf16 mixed precision (Transformer Engine casts to FP8 per GEMM). Context parallelism
over cp GPUs divides each GPU's activations by cp (each holds s/cp of the sequence).

Fit is judged on ``total``: the GPU's predicted whole-step peak (``labkit.predict.sharded_peak``: the
states and activations above, plus the loss's fp32 logits and their gradients on the last stage split
over tp, the largest layer's backward transients, the fused AdamW's temporaries (none: Megatron-LM and
DeepSpeed step with fused Adam kernels) and cuBLAS's workspaces), not on states + activations
(``states_plus_activations``, kept beside it). The machine's headroom (``advisor.machine``) stays the
margin for the caching allocator and the CUDA context.
"""

from __future__ import annotations

from dataclasses import replace
from functools import lru_cache

from labkit.advisor.costing import Layout, offload_model
from labkit.predict import offload_model as om
from labkit.predict.estimate import TrainingSetup, estimate_memory
from labkit.predict.sharded_peak import ShardedStep, sharded_peak
from labkit.reduction.design import optimizer_state_bytes
from labkit.shapes import ModelShape


@lru_cache(maxsize=4096)
def _estimate(shape: ModelShape, seq: int, dp: int, tp: int, pp: int, b: int, m: int, zero: int, recompute: str,
              precision: str, sp: bool, schedule: str, chunks: int, attention: str) -> dict[str, float]:
    setup = TrainingSetup(shape, micro_batch=b, seq=seq, precision=precision, recompute=recompute, dp=dp, tp=tp,
                          pp=pp, sp=sp, zero_stage=zero, microbatches=m, schedule=schedule, chunks=chunks,
                          attention=attention)
    return dict(estimate_memory(setup).per_device_bytes)


def memory(shape: ModelShape, seq: int, lay: Layout, m: int) -> dict[str, float]:
    """Bytes per GPU by category (parameters, gradients, optimizer, activations, total) and off the GPU."""
    widest = max(lay.stage_layers(shape.layers))  # every stage priced as the largest one: a bound
    shape = shape if widest * lay.pp == shape.layers else replace(shape, layers=widest * lay.pp)
    cp = lay.cp
    # ZeRO shards over every GPU holding the same weights: the data-parallel and context-parallel ranks
    # (Megatron-Core's distributed optimizer uses the data-parallel-with-context group).
    mem = dict(_estimate(shape, seq, lay.dp * cp, lay.tp, lay.pp, lay.micro_batch, m, lay.zero_stage, lay.recompute,
                         lay.states, lay.seq_parallel, lay.schedule, lay.chunks, lay.attention))
    psi = shape.params
    if lay.optimizer_bits == 8:
        mem["optimizer"] *= optimizer_state_bytes(psi, lay.states, 8) / optimizer_state_bytes(psi, lay.states)
    mem["dram"] = mem["nvme"] = 0.0
    mdl = offload_model(lay.offload, lay.zero_stage)
    if mdl is not None:
        n = lay.dp * cp  # ZeRO shards over the data- and context-parallel GPUs
        scale = 1.0 / (lay.tp * lay.pp)
        mem["parameters"] = (om.working_bytes(shape.params_per_layer, lay.tp) if mdl.streams_layers
                             else mdl.gpu_bytes_per_param(n) * psi * scale)
        mem["gradients"] = mem["optimizer"] = 0.0
        mem["dram"] = mdl.host_bytes_per_param * psi * scale / n
        mem["nvme"] = mdl.nvme_bytes_per_param * psi * scale / n
    mem["activations"] /= cp
    mem["states_plus_activations"] = sum(mem[k] for k in ("parameters", "gradients", "optimizer", "activations"))
    step = ShardedStep(shape, lay.micro_batch, seq, mem["parameters"], mem["gradients"], mem["optimizer"],
                       mem["activations"], lay.tp, lay.pp, cp, lay.seq_parallel,
                       "fp32" if lay.states == "fp32" else "bf16-mixed")
    mem["total"] = sharded_peak(step).peak
    return mem
