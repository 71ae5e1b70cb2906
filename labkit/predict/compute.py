"""Compute time: the one roofline every topic and the advisor price kernels with, and a transformer layer's kernels.

Every kernel here is ``labkit.hardware.roofline_time`` (Williams, Waterman and Patterson, CACM
2009) at the rates a real kernel reaches: ``GEMM_EFFICIENCY`` of the dense peak and
``HBM_EFFICIENCY`` of the memory bandwidth (:func:`kernel_seconds`). A model that only knows a
step's FLOPs (notebook 04's ZeRO-Offload, notebook 07's strategies) passes its own achieved share
of the peak (MFU) as ``efficiency``; the layer model below prices every kernel from its shape.

The end-to-end efficiency Megatron-LM reports (about half of an A100's peak, Narayanan et al.,
SC 2021, Table 1) already contains the pipeline bubble and the communication; using it as the
kernels' efficiency and adding those again counts them twice. This module prices the kernels
alone, from the shapes, so that the bubble and the collectives (``steptime``) can be added once:

* each GEMM (M x K by K x N) takes the slower of its FLOPs at ``GEMM_EFFICIENCY`` of the
  device's dense peak and its operand bytes at ``HBM_EFFICIENCY`` of its memory bandwidth
  (roofline, Williams, Waterman and Patterson, CACM 2009). ``GEMM_EFFICIENCY`` = 0.80: "optimized
  GEMM can reach up to 80-90% of the theoretical maximum device throughput" on an A100 (Dao,
  FlashAttention-2, 2023, section 1); the lower end, as training GEMMs are not all square and
  large. ``HBM_EFFICIENCY`` = 0.89: that benchmark suite's memory-bandwidth test reached 1,727 of 1,935
  GB/s on an A800 80GB PCIe, the A100's silicon (github.com/mli/transformers-benchmarks, issue 4);
* attention without FlashAttention (Megatron-LM 2021): per head, QK^T and the product with V are
  batched GEMMs with the head dimension as inner size, so they are memory-bound on an A100 below
  a head dimension of about 150; the fused scale-mask-softmax reads and writes the s x s scores
  (2 + 2 bytes) and dropout reads them, writes them and a 1-byte mask (Narayanan et al. 2021,
  section 4.2, fused kernels). With ``flash`` attention the s x s matrix never reaches HBM
  (Dao et al., NeurIPS 2022) and the two products run at ``FLASH_EFFICIENCY`` = 0.50 of peak
  (FlashAttention-2 reaches "50-73% of the theoretical maximum FLOPs/s on A100", Dao 2023; its
  lower end, as the backward pass is slower);
* element-wise kernels are memory-bound: two layer norms (read and write b s h), two fused
  bias-dropout-add (read input and residual, write output and a 1-byte mask) and the fused
  bias-GeLU on the MLP's hidden (Narayanan et al. 2021, section 4.2). Without sequence
  parallelism every tensor-parallel rank runs the b s h ones whole; with it they are split t
  ways (Korthikanti et al. 2022, section 4.2.2);
* backward does twice the forward's GEMM FLOPs and moves about twice its bytes (the weight- and
  input-gradient GEMMs, and the element-wise ops' gradients read saved inputs as well);
* each kernel costs the GPU ``LAUNCH_S`` = 4 us beyond its work, an assumption (a launch costs
  microseconds): it only shows at tiny shapes. A framework that issues its ops from Python (eager
  PyTorch) also spends host time on each op, ``dispatch_s`` (the Python call, the dispatcher, autograd's
  bookkeeping and the launch call), and that time overlaps the GPU's: CUDA kernels are queued
  asynchronously: a launch returns before the kernel runs, so the host enqueues the next ops while
  the GPU runs earlier ones (CUDA Programming Guide, section 2.3, "Asynchronous Execution"; PyTorch's
  CUDA semantics note, "Asynchronous execution"). A layer's pass then takes the slower of the two, the GPU's
  kernels with their gaps or the host's dispatch of its ops (``LayerTimes``), not their sum: a large
  shape is GPU-bound and its dispatch hidden, a small one is host-bound (the GPU waits for work).
  The overlap is taken per layer and pass, which for identical layers is the same as per pass: the
  host can run ahead of the GPU (up to the launch queue's depth) but never catch up time the GPU spent
  waiting, so a host-bound forward is not made up in a GPU-bound backward; the lead a GPU-bound pass
  builds is left out (a small overestimate). A framework whose ops are counted per pass (eager,
  ``eager_ops``) gives the backward its own launches and dispatch: its ops run from autograd's C++
  engine, without the forward's Python module calls (each pass's host time measured: ``eager_ops.HOST_BARE_OPS``);
* context parallelism over ``cp`` GPUs (Megatron-Core's context parallelism; Liu et al., "Ring
  Attention", 2023) gives each GPU s/cp of the sequence: its GEMMs and element-wise kernels run on
  b s/cp rows, and its attention on s/cp queries against all s keys (the K/V blocks come round the
  ring), 1/cp of the s x s products. Only the fused kernel runs in the ring (``steptime`` prices the
  K/V exchange).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from labkit.errors import LabkitError, require_choice
from labkit.hardware import Device, roofline_time
from labkit.predict import eager_elementwise, op_recompute
from labkit.shapes import ModelShape

GEMM_EFFICIENCY = 0.80
HBM_EFFICIENCY = 0.89
FLASH_EFFICIENCY = 0.50
LAUNCH_S = 4e-6
KERNELS_PER_LAYER = 24  # forward: 4 GEMM groups, 2 batched attention GEMMs, softmax, dropouts, norms, adds
BACKWARD_FACTOR = 2.0  # backward = 2 x forward FLOPs (Narayanan et al. 2021, appendix) and about 2 x bytes


@dataclass(frozen=True)
class LayerTimes:
    """Seconds of one layer's forward on one GPU for one micro-batch, by kind of kernel; ``launch`` the GPU's gaps
    between its kernels, ``dispatch`` the host's seconds to issue one pass of its ops (0: no host term), which
    overlap the GPU's (module text): each pass takes the slower of the two."""

    gemm: float
    attention: float
    elementwise: float
    launch: float
    dispatch: float = 0.0
    unfused: float = 0.0  # GPU seconds of the framework's extra passes, forward + backward (``profiles.extra_seconds``)
    unfused_share: float = 1 / (1 + BACKWARD_FACTOR)  # the forward's share of ``unfused`` (counted: its own)
    backward_launch: float | None = None  # the backward's launch gaps and host dispatch where they differ from the
    backward_dispatch: float | None = None  # forward's (eager's ops counted per pass, ``eager_ops``); None: the same

    @property
    def kernels(self) -> float:
        """The GPU's seconds of the forward: its kernels and the gaps between them."""
        return self.gemm + self.attention + self.elementwise + self.launch

    def _overlap(self, gpu: float, dispatch: float, share: float) -> float:
        """The slower of a pass's GPU work (its share of the extra passes included) and its dispatch, less that
        share, which ``profiles.extra_seconds`` adds."""
        return max(gpu, dispatch - share * self.unfused)

    @property
    def forward(self) -> float:
        return self._overlap(self.kernels, self.dispatch, self.unfused_share)

    @property
    def backward(self) -> float:
        launch = self.launch if self.backward_launch is None else self.backward_launch
        dispatch = self.dispatch if self.backward_dispatch is None else self.backward_dispatch
        gpu = BACKWARD_FACTOR * (self.gemm + self.attention + self.elementwise) + launch
        return self._overlap(gpu, dispatch, 1 - self.unfused_share)


def kernel_seconds(flops: float, nbytes: float, dev: Device, dtype: str = "bf16",
                   efficiency: float = GEMM_EFFICIENCY, memory_efficiency: float = HBM_EFFICIENCY) -> float:
    """A kernel's seconds: the slower of its FLOPs at ``efficiency`` x peak and its bytes at ``memory_efficiency``
    x bandwidth (``hardware.roofline_time`` at achieved rates)."""
    return roofline_time(flops, nbytes, dev, dtype, efficiency, memory_efficiency)


def gemm_seconds(m: float, n: float, k: float, dev: Device, dtype: str = "bf16", e: int = 2, count: float = 1.0,
                 efficiency: float = GEMM_EFFICIENCY) -> float:
    """``count`` GEMMs of (m x k) @ (k x n): the slower of FLOPs at ``efficiency`` x peak and bytes at HBM speed."""
    return kernel_seconds(2.0 * m * n * k * count, e * (m * k + k * n + m * n) * count, dev, dtype, efficiency)


def stream_seconds(nbytes: float, dev: Device) -> float:
    """A memory-bound kernel: its bytes at ``HBM_EFFICIENCY`` of the memory bandwidth."""
    return kernel_seconds(0.0, nbytes, dev)


@lru_cache(maxsize=4096)
def layer_times(shape: ModelShape, seq: int, micro_batch: int, tp: int, dev: Device, dtype: str = "bf16",
                sp: bool = False, flash: bool = False, launch_s: float = KERNELS_PER_LAYER * LAUNCH_S,
                gemm_efficiency: float = GEMM_EFFICIENCY, gemm_dtype: str = "", cp: int = 1,
                dispatch_s: float = 0.0, unfused_passes: float = 0.0,
                counted: eager_elementwise.Precision | None = None, backward_launch_s: float | None = None,
                backward_dispatch_s: float | None = None) -> LayerTimes:
    """One layer's forward on one of ``tp`` tensor-parallel GPUs, by kind of kernel (see the module text);
    ``launch_s`` (the GPU's launch gaps of the layer's kernels, added to them), ``dispatch_s`` (the host's
    seconds to issue the layer's ops in one pass, overlapping them) and ``gemm_efficiency`` (the share of the
    dense peak its GEMMs reach) are a framework's (``labkit.predict.profiles``); ``gemm_dtype`` the GEMMs' rate
    (fp8, tf32; default ``dtype``), with 1-byte operands at fp8; ``cp`` the context-parallel GPUs sharing the
    sequence (fused attention only); ``unfused_passes`` a framework's extra fp32 passes over b s h per layer, or
    ``counted`` (eager) each element-wise kernel's bytes at that precision (``eager_elementwise``) in place of the
    fused kernels; ``backward_launch_s`` and ``backward_dispatch_s`` the backward's, where not the forward's."""
    g, gd = gemm_efficiency, gemm_dtype or dtype
    ge = 1 if gd == "fp8" else (4 if dtype == "fp32" else 2)
    e = 4 if dtype == "fp32" else 2
    rows, h, t = micro_batch * seq / cp, shape.hidden, tp
    kv, ffn = shape.kv_hidden, shape.ffn_size
    gemm = gemm_seconds(rows, (h + 2 * kv) / t, h, dev, gd, ge, efficiency=g)  # QKV
    gemm += gemm_seconds(rows, h, h / t, dev, gd, ge, efficiency=g)  # attention output projection
    gemm += gemm_seconds(rows, ffn / t, h, dev, gd, ge, 2 if shape.gated else 1, g)  # MLP up (and gate)
    gemm += gemm_seconds(rows, h, ffn / t, dev, gd, ge, efficiency=g)  # MLP down
    heads, d = micro_batch * shape.heads / t, h // shape.heads
    if flash:
        attention = kernel_seconds(4.0 * heads * seq / cp * seq * d, 0.0, dev, dtype, FLASH_EFFICIENCY)
    elif cp > 1:
        raise LabkitError(f"cp must be 1 with explicit attention: the context-parallel ring runs the fused kernel "
                          f"(got cp={cp})")
    else:
        attention = gemm_seconds(seq, seq, d, dev, dtype, e, count=2 * heads)  # QK^T and scores @ V
        attention += stream_seconds(heads * seq * seq * (2 * e + 2 * e + 1), dev)  # softmax r/w, dropout r/w + mask
    wide = rows * h / (t if sp and t > 1 else 1)  # b s h tensors: whole on every rank without sequence parallelism
    elementwise = stream_seconds(wide * (2 * 2 * e + 2 * (3 * e + 1)) + rows * ffn / t * 2 * e, dev)
    back = {"backward_launch": backward_launch_s, "backward_dispatch": backward_dispatch_s}
    if counted is not None:  # eager: each op's bytes counted (they replace the fused kernels above)
        nb = eager_elementwise.layer_bytes(shape, counted, t, sp)
        unfused = stream_seconds(rows * nb.total, dev) if dispatch_s else 0.0
        return LayerTimes(gemm, attention, 0.0, launch_s, dispatch_s, unfused, nb.forward / nb.total, **back)
    unfused = stream_seconds(unfused_passes * 4 * wide, dev) if dispatch_s else 0.0
    return LayerTimes(gemm, attention, elementwise, launch_s, dispatch_s, unfused, **back)


@lru_cache(maxsize=1024)
def logits_seconds(shape: ModelShape, seq: int, micro_batch: int, tp: int, dev: Device, dtype: str = "bf16",
                   gemm_efficiency: float = GEMM_EFFICIENCY, cp: int = 1, gemm_dtype: str = "") -> float:
    """Forward of the output layer (h x V GEMM, split over tp) on the last pipeline stage, one micro-batch
    (its s/cp rows under context parallelism), at ``gemm_dtype``'s rate where given (tf32: fp32 operands on
    TF32 tensor cores), else ``dtype``'s."""
    return gemm_seconds(micro_batch * seq / cp, shape.vocab / tp, shape.hidden, dev, gemm_dtype or dtype,
                        4 if dtype == "fp32" else 2, efficiency=gemm_efficiency)


def op_again_seconds(shape: ModelShape, seq: int, micro_batch: int, tp: int, dev: Device, dtype: str,
                     lt: LayerTimes, gemm_efficiency: float = GEMM_EFFICIENCY, gemm_dtype: str = "",
                     cp: int = 1, sp: bool = False) -> float:
    """One layer's re-run under torchtitan's op-level policy (``labkit.predict.op_recompute``): its re-run
    matmuls (wk, wo, w3 of a Llama block) priced as the layer's GEMMs are, the bytes of its re-run element-wise
    kernels (``op_recompute.rerun_elementwise_bytes``, the uncompiled block's) at ``HBM_EFFICIENCY``, and the
    layer's launches (the whole block is replayed through the dispatcher; the saved ops answer from the cache)."""
    gd = gemm_dtype or dtype
    ge = 1 if gd == "fp8" else (4 if dtype == "fp32" else 2)
    rows = micro_batch * seq / cp
    gemm = sum(gemm_seconds(m, n, k, dev, gd, ge, efficiency=gemm_efficiency)
               for _, m, n, k in op_recompute.rerun_matmuls(shape, rows, tp))
    e = 4 if dtype == "fp32" else 2
    rerun = op_recompute.rerun_elementwise_bytes(shape, rows, e, tp, sp)
    return gemm + stream_seconds(rerun, dev) + lt.launch


RECOMPUTE_AGAIN = ("none", "selective", "full", "op")


def stage_seconds(shape: ModelShape, seq: int, micro_batch: int, tp: int, pp: int, dev: Device, dtype: str = "bf16",
                  sp: bool = False, flash: bool = False, recompute: str = "none",
                  launch_s: float = KERNELS_PER_LAYER * LAUNCH_S, layers: float | None = None,
                  gemm_efficiency: float = GEMM_EFFICIENCY, logits: bool = True,
                  gemm_dtype: str = "", cp: int = 1, dispatch_s: float = 0.0, unfused_passes: float = 0.0,
                  counted: eager_elementwise.Precision | None = None, backward_launch_s: float | None = None,
                  backward_dispatch_s: float | None = None) -> dict[str, float]:
    """Kernel seconds of one micro-batch on the slowest (last) of ``pp`` pipeline stages: forward, backward and
    the forward run again under recompute (the attention core under selective, Korthikanti et al. 2022; every
    second matmul and the element-wise kernels under torchtitan's op policy, :func:`op_again_seconds`).
    ``layers`` is that stage's layer count (default: an even split, layers / pp); ``logits`` whether it holds
    the output layer (the last stage does); ``cp`` the context-parallel GPUs sharing the sequence;
    ``dispatch_s`` the host's seconds per layer and pass, ``unfused_passes``, ``counted`` and the backward's
    launches and dispatch as in ``layer_times``."""
    lt = layer_times(shape, seq, micro_batch, tp, dev, dtype, sp, flash, launch_s, gemm_efficiency, gemm_dtype, cp,
                     dispatch_s, unfused_passes, counted, backward_launch_s, backward_dispatch_s)
    per_stage = shape.layers / pp if layers is None else layers
    head = "tf32" if gemm_dtype == "tf32" else ""  # the output layer stays in 16 bits under fp8 (Transformer Engine)
    logits = logits_seconds(shape, seq, micro_batch, tp, dev, dtype, gemm_efficiency, cp, head) if logits else 0.0
    require_choice("recompute", recompute, RECOMPUTE_AGAIN)
    again = (op_again_seconds(shape, seq, micro_batch, tp, dev, dtype, lt, gemm_efficiency, gemm_dtype, cp, sp)
             if recompute == "op" else {"none": 0.0, "selective": lt.attention, "full": lt.forward}[recompute])
    return {"forward": per_stage * lt.forward + logits, "backward": per_stage * lt.backward + 2 * logits,
            "recompute": per_stage * again}
