"""Seconds of one training step, each overhead counted once: kernels, bubble, collectives, optimizer, offload.

A pipeline stage's time per micro-batch is its layers' kernels (``kernels.layer_times``: forward,
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
* pipeline parallelism: per micro-batch and model chunk, one activation forward and one gradient
  backward between neighbouring stages, b s h / t each with Megatron's scatter/gather over the
  t links of a node (Narayanan et al. 2021, section 4.1), then an all-gather over NVLink; not
  overlapped;
* data parallelism, once per step after the pipeline flushes (Narayanan et al. 2021, section
  3.3.2: "data parallelism only needs to perform expensive all-reduce communication once per
  batch"): a ring all-reduce of the gradients (2 (d-1)/d x 2 Psi/(t p) bytes), not overlapped.
  ZeRO-1 moves the same bytes (reduce-scatter, then all-gather of parameters). ZeRO-2 in
  DeepSpeed reduce-scatters the gradients after every micro-batch's backward, overlapped with that
  backward ("overlap_comm"), and all-gathers the updated parameters once per step. ZeRO-3
  all-gathers the parameters for the forward and again for the backward (the recomputed forward
  under full recompute) and reduce-scatters the gradients, every micro-batch (Rajbhandari et al.,
  SC 2020, section 7: 3 Psi): not overlapped, as Narayanan et al.'s Table 2 shows (throughput per
  GPU halves when the GPUs double at a fixed batch: the per-GPU gather volume does not shrink);
* collectives run at the bus bandwidth NCCL reaches: ``NVLINK_BUS_EFFICIENCY`` = 200/300 (about
  200 GB/s all-reduce bus bandwidth on 8 A100-SXM4-80GB over NVLink, whose per-direction link is
  300 GB/s: github.com/NVIDIA/nccl-tests issue 149) and ``NETWORK_BUS_EFFICIENCY`` = 0.848 (84.8 of
  100 GB/s on 3 nodes of A100 with HDR InfiniBand: nccl-tests issue 119);
* the optimizer: Adam reads and writes the fp32 master weights and both moments and reads the
  gradients of its shard, at HBM speed (``kernels.stream_seconds``); on the CPU for offload;
* offload: the bytes of ``labkit.predict.offload_model`` over PCIe and the host's NVMe drives, not
  overlapped (a conservative bound).
"""

from __future__ import annotations

from labkit.advisor import kernels
from labkit.hardware import Link, transfer_time
from labkit.predict.estimate import PRECISIONS

NVLINK_BUS_EFFICIENCY = 200 / 300
NETWORK_BUS_EFFICIENCY = 0.848
ADAM_BYTES = {32: 4 * 2 + 4 * 2 + 4 * 2, 8: 4 * 2 + 1 * 2 + 1 * 2}  # master, m, v read and written (8-bit: m, v)
TIMES = ("compute", "bubble", "tp", "pp", "dp", "optimizer", "offload")


def bus_bandwidth(link: Link) -> float:
    """Bytes per second a ring collective reaches on ``link`` (NCCL's bus bandwidth)."""
    eff = NVLINK_BUS_EFFICIENCY if link.kind == "nvlink" else NETWORK_BUS_EFFICIENCY
    return link.bandwidth * eff


def allreduce_seconds(nbytes: float, n: int, link: Link) -> float:
    """Ring all-reduce of ``nbytes`` over ``n`` GPUs: 2 (n-1)/n x bytes at bus bandwidth, 2 (n-1) latencies."""
    if n <= 1 or nbytes <= 0:
        return 0.0
    return 2 * (n - 1) * link.latency_s + 2 * (n - 1) / n * nbytes / bus_bandwidth(link)


def gather_seconds(nbytes: float, n: int, link: Link) -> float:
    """Ring all-gather (or reduce-scatter) of ``nbytes`` in all over ``n`` GPUs: half an all-reduce."""
    return allreduce_seconds(nbytes, n, link) / 2


def stage_seconds(shape, seq: int, lay, dev, dtype: str) -> dict[str, float]:
    """Kernel seconds of one micro-batch on the slowest (last) pipeline stage: forward, backward, recompute."""
    lt = kernels.layer_times(shape, seq, lay.micro_batch, lay.tp, dev, dtype, lay.seq_parallel,
                             lay.attention == "fused")
    per_stage = shape.layers / lay.pp
    logits = kernels.logits_seconds(shape, seq, lay.micro_batch, lay.tp, dev, dtype)
    again = {"none": 0.0, "selective": lt.attention, "full": lt.forward}[lay.recompute]
    return {"forward": per_stage * lt.forward + logits, "backward": per_stage * lt.backward + 2 * logits,
            "recompute": per_stage * again}


def tp_seconds(shape, seq: int, lay, link: Link, e: int) -> float:
    """Exposed tensor-parallel collectives of one micro-batch on one stage."""
    if lay.tp == 1:
        return 0.0
    count = 4 + (2 if lay.recompute == "full" else 0)
    return count * shape.layers / lay.pp * allreduce_seconds(e * lay.micro_batch * seq * shape.hidden, lay.tp, link)


def pp_seconds(shape, seq: int, lay, link: Link, nvlink: Link, e: int) -> float:
    """Exposed pipeline sends of one micro-batch on one stage: forward and backward, per model chunk."""
    if lay.pp == 1:
        return 0.0
    full = e * lay.micro_batch * seq * shape.hidden
    send = transfer_time(full / lay.tp, link) + (gather_seconds(full, lay.tp, nvlink) if lay.tp > 1 else 0.0)
    return 2 * lay.chunks * send


def dp_seconds(params_per_gpu: float, lay, m: int, link: Link, e_grad: int, e_weight: int,
               backward_s: float) -> tuple[float, float]:
    """(bytes moved, exposed seconds) of the data-parallel traffic of one step for the layout's ZeRO stage."""
    d = lay.dp
    if d == 1:
        return 0.0, 0.0
    grads, weights = e_grad * params_per_gpu, e_weight * params_per_gpu
    if lay.zero_stage <= 1:
        moved, exposed = 2 * (d - 1) / d * grads, allreduce_seconds(grads, d, link)
    elif lay.zero_stage == 2:
        per_mb = gather_seconds(grads, d, link)
        moved = (d - 1) / d * (m * grads + weights)
        exposed = m * max(0.0, per_mb - backward_s) + gather_seconds(weights, d, link)
    else:
        moved = m * (d - 1) / d * (2 * weights + grads)
        exposed = m * (2 * gather_seconds(weights, d, link) + gather_seconds(grads, d, link))
    return moved, exposed


def optimizer_seconds(params_on_gpu: float, lay, dev) -> float:
    """Adam's update of the GPU's shard at HBM speed (0 when the optimizer runs on the CPU)."""
    if lay.offload != "none":
        return 0.0
    e = PRECISIONS[lay.precision].grads
    return kernels.stream_seconds(params_on_gpu * (ADAM_BYTES[lay.optimizer_bits] + e + 2), dev)
