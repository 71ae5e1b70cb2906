"""Seconds of one training step, each overhead counted once: kernels, bubble, collectives, optimizer, offload.

A pipeline stage's time per micro-batch is its layers' kernels (``labkit.predict.compute.stage_seconds``: forward,
backward, and the forward again under full recompute, or the attention core under selective
recompute, Korthikanti et al. 2022) plus the last stage's output layer, plus the collectives that
sit on the critical path. Then, for p stages, m micro-batches and v model chunks per GPU:

* step = m x (per micro-batch) + bubble, bubble = (p-1)/v x (per micro-batch): 1F1B and GPipe
  idle (p-1) micro-batch slots, the interleaved schedule (p-1)/v (Narayanan et al., SC 2021,
  section 2.2);
* tensor parallelism: two all-reduces of b s h per layer in the forward and two in the backward
  (Megatron, Shoeybi et al. 2019), two more when full recompute repeats the forward; sequence
  parallelism turns each into a reduce-scatter and an all-gather of the same bytes (Korthikanti
  et al. 2022, section 4.2.2). Not overlapped: Megatron-LM's all-reduces sit between dependent
  GEMMs;
* context parallelism over c GPUs (Megatron-Core's context parallelism; Liu et al., "Ring Attention",
  2023): each GPU holds s/c of every sequence, so every b s h figure above and below is b (s/c) h;
  attention runs as a ring: in each layer's forward the K and V blocks of s/c positions go round
  the c GPUs, c - 1 sends of 2 b (s/c) kv_dim e / t bytes from each GPU, and the backward sends K, V
  and their gradients dK, dV (twice the bytes), again for the forward recompute repeats (selective or
  full). Overlap rule (``Profile.overlap_cp``, on in every profile): each send is issued before the
  attention of the block in hand (Transformer Engine's ring, which Megatron-Core runs; Liu et al.
  section 3), so a step exposes only
  what its send takes beyond one block's attention (1/c of the layer's); a profile that sets
  ``overlap_cp = False`` exposes every send. A ring that spans nodes crosses them one GPU per port, as
  the pipeline's sends do;
* pipeline parallelism: per micro-batch and model chunk, one activation forward and one gradient
  backward between neighbouring stages, b s h / t each with Megatron's scatter/gather over the
  t links of a node (Narayanan et al. 2021, section 4.1), then an all-gather over NVLink; not
  overlapped;
* gradient accumulation: a framework that adds each micro-batch's 16-bit weight gradient into an fp32
  ``main_grad`` in a separate kernel (Megatron-LM 2021) moves ``Profile.grad_accum_bytes`` per parameter of
  the stage every micro-batch, at memory speed: part of the micro-batch's time, so of the bubble too;
* data parallelism (over d x c GPUs with context parallelism: the gradients of every sequence's
  c pieces are reduced together, Megatron-Core's data-parallel-with-context group), once per step
  after the pipeline flushes (Narayanan et al. 2021, section 3.3.2: "data parallelism only needs
  to perform expensive all-reduce communication once per batch"): a ring all-reduce of the
  gradients (2 (d-1)/d x 2 Psi/(t p) bytes), not overlapped.
  ZeRO-1 moves the same bytes (reduce-scatter, then all-gather of parameters). ZeRO-2 in
  DeepSpeed reduce-scatters the gradients after every micro-batch's backward, overlapped with that
  backward ("overlap_comm"), and all-gathers the updated parameters once per step. ZeRO-3
  all-gathers the parameters for the forward and again for the backward (the recomputed forward
  under full recompute) and reduce-scatters the gradients, every micro-batch (Rajbhandari et al.,
  SC 2020, section 7: 3 Psi); a framework that releases a gathered module unless it is used again
  within ``Profile.reuse_distance`` parameters (DeepSpeed's ``stage3_max_reuse_distance``) gathers
  again, for the backward after the recomputed forward, each matrix whose later matrices in the layer
  (recomputed, then their backward) exceed it (:func:`regather_share`). The per-GPU volume does not
  shrink with more GPUs, so at a fixed batch throughput per GPU falls (Narayanan et al., Table 2).
  Overlapped where the profile prefetches (``Profile.overlap_sharded``): only what exceeds a
  micro-batch's kernels is exposed, and no less than ``Profile.exposed_share`` of it;
* collectives are ``labkit.predict.collectives`` (ring algorithm, latency terms, NCCL's bus
  bandwidth: the one cost model notebooks 02, 03 and 09 share);
* the optimizer: Adam reads and writes the fp32 master weights and both moments and reads the
  gradients of its shard, at HBM speed (``compute.stream_seconds``); on the CPU for offload;
* offload: the bytes of ``labkit.predict.offload_model`` over PCIe and the host's NVMe drives, not
  overlapped (a conservative bound).
"""

from __future__ import annotations

from labkit.hardware import Link, transfer_time
from labkit.predict import collectives as coll
from labkit.predict import compute, profiles
from labkit.predict.estimate import PRECISIONS
from labkit.predict.profiles import DEFAULT_FRAMEWORK, PROFILES, Profile

ADAM_BYTES = {32: 4 * 2 + 4 * 2 + 4 * 2, 8: 4 * 2 + 1 * 2 + 1 * 2}  # master, m, v read and written (8-bit: m, v)
DEFAULT = PROFILES[DEFAULT_FRAMEWORK]
TIMES = ("compute", "bubble", "tp", "cp", "pp", "dp", "optimizer", "offload")


def tp_seconds(shape, seq: int, lay, link: Link, e: int, hidden_behind_s: float = 0.0) -> float:
    """Exposed tensor-parallel collectives of one micro-batch on one stage; with ``hidden_behind_s`` (the
    micro-batch's kernels, where the framework overlaps them: ``profiles``) only what exceeds it."""
    if lay.tp == 1:
        return 0.0
    count = 4 + (2 if lay.recompute in ("full", "op") else 0)  # op re-runs the all-gathers (op_recompute)
    comm = count * shape.layers / lay.pp * coll.all_reduce(e * lay.micro_batch * seq * shape.hidden, lay.tp, link)
    return max(0.0, comm - hidden_behind_s) if hidden_behind_s else comm


def cp_seconds(shape, seq: int, lay, link: Link, e: int, attention_s: float, prof: Profile = DEFAULT) -> float:
    """Exposed ring exchange of one micro-batch on one stage's ``max(stage_layers)`` layers (module text):
    ``attention_s`` is one layer's forward attention on this GPU (all c blocks), ``seq`` the whole sequence."""
    if lay.cp == 1:
        return 0.0
    send = transfer_time(2 * e * lay.micro_batch * seq / lay.cp * shape.kv_hidden / lay.tp, link)
    hidden = attention_s / lay.cp if prof.overlap_cp else 0.0
    forward = (lay.cp - 1) * max(0.0, send - hidden)
    backward = (lay.cp - 1) * max(0.0, 2 * send - 2 * hidden)  # K, V and dK, dV; the backward's attention is 2x
    again = forward if lay.recompute in ("selective", "full") else 0.0  # op keeps the SDPA output
    return max(lay.stage_layers(shape.layers)) * (forward + backward + again)


def pp_seconds(shape, seq: int, lay, link: Link, nvlink: Link, e: int) -> float:
    """Exposed pipeline sends of one micro-batch on one stage: forward and backward, per model chunk, each its
    bytes and the link's latency (module text); ``labkit.sim.simulate_pipeline`` with blocking sends shows
    the same 2 v sends per micro-batch on the critical path (``tests/test_pipeline_term.py``)."""
    if lay.pp == 1:
        return 0.0
    full = e * lay.micro_batch * seq * shape.hidden
    send = transfer_time(full / lay.tp, link) + (coll.all_gather(full, lay.tp, nvlink) if lay.tp > 1 else 0.0)
    return 2 * lay.chunks * send


def grad_accum_seconds(params_on_gpu: float, dev, prof: Profile = DEFAULT) -> float:
    """One micro-batch's unfused gradient accumulation (``Profile.grad_accum_bytes`` per parameter of the stage,
    at memory speed; 0 where the framework fuses it into the weight-gradient GEMM)."""
    return compute.stream_seconds(prof.grad_accum_bytes * params_on_gpu, dev) if prof.grad_accum_bytes else 0.0


def regather_share(shape, lay, prof: Profile = DEFAULT) -> float:
    """Share of a layer's weights ZeRO-3 gathers a third time per micro-batch (module text): under full recompute,
    each weight matrix whose reuse distance, twice the parameters of the layer's later matrices (on this GPU's
    tp slice: DeepSpeed counts a module's own ``ds_numel``), exceeds ``prof.reuse_distance``; 0 otherwise."""
    if lay.zero_stage < 3 or lay.recompute != "full" or prof.reuse_distance == float("inf"):
        return 0.0
    h, f, kv = shape.hidden, shape.ffn_size, shape.kv_hidden
    mats = [h * (h + 2 * kv), h * h] + [h * f] * (3 if shape.gated else 2)  # forward order: qkv, proj, MLP
    again = sum(n for i, n in enumerate(mats) if 2 * sum(mats[i + 1:]) / lay.tp > prof.reuse_distance)
    return again / sum(mats)


def dp_seconds(params_per_gpu: float, lay, m: int, link: Link, e_grad: int, e_weight: int,
               backward_s: float, micro_batch_s: float = 0.0, prof: Profile = DEFAULT,
               regather: float = 0.0) -> tuple[float, float]:
    """(bytes moved, exposed seconds) of the data-parallel traffic of one step for the layout's ZeRO stage,
    with the overlap the framework achieves (``profiles``): ``backward_s`` and ``micro_batch_s`` are one
    micro-batch's backward and whole kernels; ``regather`` is the share of the weights ZeRO-3 gathers a third
    time (:func:`regather_share`). The group is dp x cp GPUs (module text)."""
    d = lay.dp * lay.cp
    if d == 1:
        return 0.0, 0.0
    grads, weights = e_grad * params_per_gpu, e_weight * params_per_gpu
    if lay.zero_stage <= 1:
        moved, exposed = 2 * (d - 1) / d * grads, coll.all_reduce(grads, d, link)
        if prof.overlap_dp and lay.pp == 1:  # bucketed all-reduce during the last micro-batch's backward
            exposed = max(0.0, exposed - backward_s)
    elif lay.zero_stage == 2:
        per_mb = coll.reduce_scatter(grads, d, link)
        moved = (d - 1) / d * (m * grads + weights)
        exposed = m * max(0.0, per_mb - backward_s) + coll.all_gather(weights, d, link)
    else:
        gathers = 2 + regather
        moved = m * (d - 1) / d * (gathers * weights + grads)
        per_mb = gathers * coll.all_gather(weights, d, link) + coll.reduce_scatter(grads, d, link)
        hidden = max(per_mb * prof.exposed_share, per_mb - micro_batch_s)
        exposed = m * (hidden if prof.overlap_sharded else per_mb)
    return moved, exposed


def framework_seconds(shape, seq: int, lay, dev, prof: Profile) -> float:
    """What the framework adds to one micro-batch's kernels on the last stage: ``profiles.extra_seconds`` (the
    one function ``predict.step_seconds`` shares): unfused fp32 element-wise passes over b s h in every layer,
    the fp32 cross-entropy over b s V and, where the profile runs ``nn.Embedding`` unfused, its backward.
    ``seq`` is the whole sequence; each of the layout's cp GPUs holds s/cp of it."""
    return profiles.extra_seconds(shape, seq, lay.micro_batch, lay.tp, lay.pp, dev, prof, lay.seq_parallel,
                                  lay.cp)


def optimizer_seconds(params_on_gpu: float, lay, dev) -> float:
    """Adam's update of the GPU's shard at HBM speed (0 when the optimizer runs on the CPU)."""
    if lay.offload != "none":
        return 0.0
    e = PRECISIONS[lay.states].grads
    return compute.stream_seconds(params_on_gpu * (ADAM_BYTES[lay.optimizer_bits] + e + 2), dev)
