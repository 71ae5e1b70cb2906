"""Framework profiles: what the software stack adds to the kernels and which communication it hides.

The same layout runs at different speeds under different frameworks: Megatron-LM fuses its
element-wise kernels and launches few of them; eager PyTorch with transformers launches every
operation from Python, keeps norms and the loss in fp32 under autocast and runs each element-wise
op as its own kernel; FSDP prefetches the next layer's parameters while the current one computes.
A profile is one named set of these assumptions, the same for every row it is used on, and each
constant says where it comes from. ``labkit advise --framework NAME`` chooses one; every plan
prints the profile it was priced with.

* ``megatron-2021``: Megatron-LM as in Narayanan et al., SC 2021, with 2021's kernels: attention
  written out (Q K^T, the fused scale-mask-softmax, dropout: FlashAttention came in 2022), no
  sequence parallelism (Korthikanti et al. 2022), the fused bias-GeLU, bias-dropout-add and layer
  norm of section 4.2 (``compute.KERNELS_PER_LAYER`` launches of ``compute.LAUNCH_S`` each);
  collectives not overlapped; and gradient accumulation unfused: each micro-batch's 16-bit weight
  gradient is added into the fp32 ``main_grad`` by a backward hook (``param.main_grad.add_(param.grad)``
  in Megatron-LM's 2021 ``DistributedDataParallel``), ``GRAD_ACCUM_BYTES`` per parameter per
  micro-batch at memory speed. NCCL's rings use every port of a node (nccl-tests issue 119), as for
  every profile but ``deepspeed-2021``: the paper's Table 2 runs, which once chose one port here, are
  DeepSpeed's and are priced under that profile.
* ``megatron-te``: Megatron-Core with Transformer Engine, what a practitioner runs today (the default):
  fused attention (cuDNN/FlashAttention), sequence parallelism, the same fused element-wise kernels,
  the weight-gradient GEMM accumulating into ``main_grad`` (``--gradient-accumulation-fusion``), and the
  distributed optimizer's ``--overlap-grad-reduce --overlap-param-gather`` hide data-parallel
  traffic behind the backward and forward (Megatron-Core documentation, distributed optimizer), and
  ``--tp-comm-overlap`` runs the tensor-parallel all-gathers and reduce-scatters inside the GEMMs
  (Transformer Engine's userbuffers), so only what exceeds a micro-batch's kernels is exposed;
  NCCL's rings use every port of a node (nccl-tests issue 119).
* ``fsdp``: PyTorch FSDP with FlashAttention (llm-foundry, torchtitan): each layer's all-gather is
  prefetched during the previous layer's compute and gradients are reduce-scattered during the
  backward (Zhao et al., "PyTorch FSDP", VLDB 2023, section 3.3.2, backward and forward
  prefetching), so only what exceeds a micro-batch's compute is exposed, and no less than
  ``FSDP_EXPOSED_SHARE`` (three quarters) of it; every port of a node; GEMMs at ``FSDP_GEMM_EFFICIENCY`` of the
  peak, ``FSDP_BSH_PASSES`` unfused element-wise passes and the fp32 cross-entropy. The three constants
  are fitted together on the 11 llm-foundry H100 rows of ``datasets/llm_foundry_h100.toml`` by the rule
  ``advisor.holdout.refit`` states (a joint grid's minimax of |log ratio|); they are fitted stand-ins, and
  that table alone does not pin them apart (``holdout.FITTED``'s note).
* ``eager``: eager PyTorch + transformers (a plain training loop, autocast bf16, fused AdamW,
  sdpa): per-operation dispatch and launch, element-wise ops unfused and norms in fp32 under
  autocast (each kernel's bytes counted from transformers' code, ``predict.eager_elementwise``),
  and the cross-entropy's fp32 logits over b s V (``CE_PASSES``); the host's per-op dispatch
  (``eager_ops.HOST_BARE_OPS``: a layer's host time per pass measured in bare ops on tiny models, times the
  H200 host's bare op ``EAGER_BARE_OP_S``) overlaps the GPU's kernels (``compute.LayerTimes``), which keep the
  GPU's 4 us gap per counted launch. Fitted on the three H200 runs of ``datasets/h200_eager.toml`` (issue 21),
  re-fitted when the embedding's backward and AdamW became explicit terms (issue 22, below) and when the dispatch became
  an overlapped term and when the host's bare ops were measured (issue 29); since issue 29 only its GEMMs' share of
  the peak is fitted (three runs, one constant).
* ``deepspeed-2021``: DeepSpeed ZeRO-3 of 2021 driving Megatron-LM's model code, as the ZeRO-3 rows of
  Narayanan et al.'s Table 2 ran ("We integrated ZeRO into our codebase using the DeepSpeed Python
  library", section 5.2): ``megatron-2021``'s kernels (explicit attention, the fused kernels of section
  4.2, no SP), no unfused ``main_grad`` pass (DeepSpeed reduce-scatters each gradient in its backward hook
  and adds it into its fp32 shard, 1/d of the parameters), no overlap of a ZeRO-0/1 all-reduce (DeepSpeed's
  ``overlap_comm`` is a stage-2/3 option). ZeRO-3's gathers are prefetched on a side stream
  (``stage3_prefetch_bucket_size``, DeepSpeed configuration documentation) and overlap compute, with
  ``DEEPSPEED_EXPOSED_SHARE`` of them exposed; a gathered module is released after its use unless it is
  used again within ``stage3_max_reuse_distance`` parameters (default 1e9, same documentation;
  ``PartitionedParameterCoordinator._keep_for_later`` in 2021's ``deepspeed/runtime/zero/stage3.py``),
  so under full recompute the backward gathers again every matrix whose reuse distance (the parameters of
  the layer's later matrices, recomputed forward then backward) exceeds it (``Profile.reuse_distance``,
  ``advisor.steptime.regather_share``): two thirds of a 175B layer, nothing of a 13B one. A data-parallel
  ring spanning nodes runs over one port per GPU, not a node's aggregate (Table 2's communication-bound rows
  move 3.7 x 2 Psi bytes per GPU in 66.7 s and 180 s, about one HDR port's NCCL bus bandwidth), and half of
  the gathers stay exposed (set by the micro-batch-4 rows, where compute could hide them): both chosen on
  Table 2 (``holdout.FITTED``), fitted stand-ins for what the 2021 code paid beyond the bytes. DeepSpeed's
  stage 3 of mid-2021 called ``torch.cuda.synchronize()`` before every parameter's all-gather, so its prefetch
  was "not async at all" (DeepSpeed PR 1188, June 2021, measured on DeepSpeed 0.3.16; the paper names no
  version, and its runs predate that PR), and gathered each parameter into a list of one tensor per rank,
  which torch's NCCL process group fills with one copy per rank (``ProcessGroupNCCL::allgather``). No second
  publication of that code with its shapes exists, so the table's two models are two reference sets, each
  judged by the values chosen on the other's rows alone: leave one model out within one table, weaker than
  leaving out a source (one paper, cluster and code behind both).

Two terms the ``eager`` profile (``nn.Embedding`` and AdamW run as PyTorch ships them) prices explicitly
(:func:`extra_seconds`, the one function the advisor's ``steptime.framework_seconds`` and
``predict.step_seconds`` share): the embedding's backward, a scatter-add of the b s rows of the
output gradient into a V x h gradient that is zeroed first (``embedding_dense_backward`` in
``aten/src/ATen/native/Embedding.cpp``; split over tp with a vocab-parallel embedding); and the
optimizer step at the implementation's bytes per parameter (:func:`optimizer_bytes_per_param`, read
off ``torch/optim/adamw.py``) at memory bandwidth, or a calibration's measured seconds per parameter.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from labkit.errors import require_choice
from labkit.predict import compute, eager_elementwise, eager_ops

# eager: fitted on datasets/h200_eager.toml (TinyLlama-1.1B, Qwen2-1.5B, GPT-2 medium on one H200): issue 21, re-fitted
# in issue 22 (the embedding's backward and AdamW's bytes priced explicitly) and in issue 29, when the host's dispatch
# became an overlapped term (compute.LayerTimes: each pass the slower of the GPU's kernels and the host's dispatch, no
# longer their sum). Issue 29 then counted the element-wise bytes (EAGER_ELEMENTWISE) in place of the fitted uniform
# bsh_passes (270 passes, in-sample 1.14, 1.14, 0.86), and each layer's ops per pass (eager_ops) in place of the
# 70 kernels per layer issue 22 fitted; only the GEMMs' share of the peak is fitted now
# The host's seconds of a layer's pass: eager_ops.HOST_BARE_OPS (measured on the CPU in bare ops, by family and
# precision: labkit.measure.host_time) x EAGER_BARE_OP_S, the H200 host's bare op (or a calibration's launch_s);
# issue 29 first assumed 20 us per counted op forward, 0.65 of it backward: 2-4x below the measured bare ops
EAGER_GEMM_EFFICIENCY = 0.55  # fitted on h200_eager.toml (holdout.FITTED, grid 0.50-0.80, minimax of |log ratio|)
# once the host's bare ops per layer were measured (eager_ops.HOST_BARE_OPS): in-sample 1.03, 1.06, 0.95 (0.50 gives
# 1.08, 1.13, 0.97; 0.60 0.98, 1.01, 0.93). With the dispatch assumed at 20 us per counted op it sat at the grid's
# floor with GPT-2 medium 0.85: GPT-2's layer costs its host 203 + 173 bare ops (fp32 weights under autocast, its
# dropouts), more than the Llamas' for fewer counted ops, which the assumed per-op cost left out
EAGER_ELEMENTWISE = eager_elementwise.Precision()  # each element-wise kernel of a transformers layer counted from its
# code (autocast bf16 over the weights' dtype as built, dropout where the config has it, CUDA's kernels), and each
# layer's ops per pass (eager_ops); not fitted
CE_PASSES = 4  # fp32 logits over b s V: written, read by log-softmax, gradient written and read
# megatron-2021: main_grad.add_(grad) per micro-batch: read the 16-bit gradient (2), read, write fp32 main_grad (4+4)
GRAD_ACCUM_BYTES = 2 + 4 + 4
# deepspeed-2021: DeepSpeed's configuration documentation, stage3_max_reuse_distance (default 1e9 parameters)
DEEPSPEED_REUSE_DISTANCE = 1e9
# deepspeed-2021: share of prefetched ZeRO-3 traffic left exposed; fitted on sc21-table2-175b and -530b together, and
# chosen again on either alone (holdout.FITTED)
DEEPSPEED_EXPOSED_SHARE = 0.5
# fsdp: the three fitted together on datasets/llm_foundry_h100.toml (11 MPT rows on 8 to 64 H100s) by the joint grid
# of holdout.FITTED: 0.60, 0.75, 30, worst |log ratio| 0.098 (in-sample 0.91-1.09). Stored until Dec 2026 as 0.60,
# 0.50, 20 (worst 0.139), which the stated rule does not give: a one-constant-at-a-time pass from the priors stops at
# 0.50, 0, 0
FSDP_GEMM_EFFICIENCY = 0.60  # nn.Linear under autocast in a sharded model: below the 0.80 of tuned GEMMs
FSDP_EXPOSED_SHARE = 0.75  # at least three quarters of the sharded traffic stays exposed, however long the compute
# (NCCL's kernels share the SMs and HBM): the fit's value, at its grid's top
FSDP_BSH_PASSES = 30  # unfused element-wise passes (plain torch LayerNorm, GeLU, residual adds): the fit's value, at
# its grid's top


OPTIMIZER_IMPLEMENTATIONS = ("fused", "foreach", "lab")
# bytes each AdamW implementation reads and writes per fp32 parameter in one step (torch/optim/adamw.py):
# fused: one kernel reads param, grad, m, v and writes param, m, v (7 x 4 B); foreach and the single-tensor loop
# run each line as its own pass: lerp_ on m (r m, g; w m), mul_ and addcmul_ on v (r/w v; r v, g; w v), sqrt into
# a temporary (r v; w t), the division by the bias correction (r t; w t'), add_ eps (r/w t'), addcdiv_ (r p, m, t';
# w p); foreach also decays the weights (r/w p); the lab's single-tensor AdamW runs with weight_decay=0, which
# torch skips (labkit.rig.train)
_PASSES = 12 + 8 + 12 + 8 + 8 + 8 + 16
ADAMW_BYTES = {"fused": 28, "foreach": _PASSES + 8, "lab": _PASSES}
# the lab's MasterWeightAdamW under bf16-mixed also copies each 16-bit gradient to fp32 (r 2, w 4) and writes the
# updated 16-bit weights from the fp32 master (r 4, w 2): labkit.rig.train
MASTER_COPY_BYTES = 2 + 4 + 4 + 2
# the lab's optimizer's host seconds per parameter tensor, in bare ops (one bare op: calibrate's launch_s, a
# one-element torch.mul in a Python loop), by master weights: measured (issue 29, labkit.measure.optimizer_host) on
# this repository's CPU host (torch 2.13, two cores) over 300 tensors of 8 elements, alternating with the bare op:
# MasterWeightAdamW over bf16 weights 26-52 us per tensor beside 2.8-6.0 us per op, ratio 8.7-9.2 over six runs (the
# cast, torch's single-tensor AdamW, the copy back, the loops); fp32's AdamW(foreach=False) 7.7-8.1 over three.
# Taken to carry over to a GPU's host, whose bare op adds the launch call (as eager_ops.HOST_BARE_OPS does)
LAB_ADAMW_HOST_OPS = {True: 9.0, False: 7.9}
EAGER_BARE_OP_S = 9.4e-6  # one bare op on the H200's host: the calibration's launch_s in
# datasets/measurements/h200-gpu-check-2026-12.jsonl (9.42 us); what a calibration's own launch_s replaces


@dataclass(frozen=True)
class Profile:
    """One framework's kernel and overlap assumptions (module text), with their sources."""

    name: str
    label: str
    kernels_per_layer: int
    launch_s: float
    aggregate_ports: bool  # a data-parallel group spanning nodes uses min(ports, its GPUs on a node) ports
    overlap_sharded: bool  # ZeRO-3/FSDP gathers and reduce-scatters hidden behind a micro-batch's compute
    overlap_dp: bool  # ZeRO-0/1 gradient all-reduce overlapped with the backward (bucketed, as DDP does)
    bsh_passes: float = 0.0  # extra fp32 passes over b s h per layer (fwd + bwd)
    ce_passes: float = 0.0  # fp32 passes over the b s V logits for the cross-entropy
    gemm_efficiency: float = compute.GEMM_EFFICIENCY  # share of the dense peak the framework's GEMMs reach
    exposed_share: float = 0.0  # share of overlapped sharded traffic that stays exposed (NCCL shares SMs and HBM)
    grad_accum_bytes: float = 0.0  # bytes per parameter each micro-batch's unfused gradient accumulation moves
    attention: str = "fused"  # the framework's attention kernel, unless the layout names one (``predict.attention``)
    sp: bool = True  # sequence parallelism with tp > 1, unless the layout says
    pins_kernels: bool = False  # the framework has only these kernels: the search does not try the others
    overlap_tp: bool = False  # tensor-parallel collectives overlapped with the GEMMs (Transformer Engine userbuffers)
    overlap_cp: bool = True  # context-parallel ring sends overlapped with the blocks' attention (advisor.steptime)
    embedding_backward: bool = False  # nn.Embedding's unfused scatter-add backward priced explicitly
    # ZeRO-3 keeps a gathered module for its next use within this many parameters (DeepSpeed's
    # stage3_max_reuse_distance); inf: from the recomputed forward to the backward, as FSDP does
    reuse_distance: float = math.inf
    source: str = ""
    dispatch_s: float = 0.0  # the host's seconds per op and pass, overlapping the GPU (``compute``); 0: none
    # eager: each element-wise kernel's bytes (``eager_elementwise``) and each layer's ops per pass (``eager_ops``)
    # counted from the model's code at this precision, in place of the fused kernels and ``kernels_per_layer``
    # counted too: the host's pass is the measured ``eager_ops.host_bare_ops`` x ``dispatch_s`` (then a bare op)
    counted: eager_elementwise.Precision | None = None

    @property
    def launch_per_layer_s(self) -> float:
        """The GPU's launch gaps of one layer's kernels in one pass, added to them."""
        return self.kernels_per_layer * self.launch_s

    @property
    def dispatch_per_layer_s(self) -> float:
        """The host's seconds to issue one layer's ops in one pass, overlapping the GPU's (``compute.LayerTimes``)."""
        return self.kernels_per_layer * self.dispatch_s

    def layer_kwargs(self, shape) -> dict:
        """The per-layer launch, dispatch and element-wise arguments of ``compute.layer_times`` for ``shape``:
        ``kernels_per_layer`` in each pass, or (a ``counted`` profile) each pass's counted ops."""
        prec = self.counted
        if prec is None:
            return {"launch_s": self.launch_per_layer_s, "dispatch_s": self.dispatch_per_layer_s,
                    "unfused_passes": self.bsh_passes}
        ops = eager_ops.layer_ops(shape, prec)
        host = eager_ops.host_bare_ops(shape, prec)
        return {"launch_s": ops.forward * self.launch_s, "dispatch_s": host[0] * self.dispatch_s,
                "backward_launch_s": ops.backward * self.launch_s, "backward_dispatch_s": host[1] * self.dispatch_s,
                "counted": prec}

    def measured_launch(self, seconds: float) -> Profile:
        """This profile with a calibration's measured per-op cost (a loop of one-element ops: host-bound, so the
        host's dispatch and the launch call) in place of its host dispatch, or of its launch where it has none."""
        return replace(self, **{"dispatch_s" if self.dispatch_s else "launch_s": float(seconds)})


PROFILES = {
    "megatron-2021": Profile("megatron-2021", "Megatron-LM (Narayanan et al. 2021)", compute.KERNELS_PER_LAYER,
                             compute.LAUNCH_S, True, False, False, grad_accum_bytes=GRAD_ACCUM_BYTES,
                             attention="explicit", sp=False, pins_kernels=True,
                             source="Narayanan et al., SC 2021 (kernels of section 4.2); nccl-tests issue 119 (ports)"),
    "megatron-te": Profile("megatron-te", "Megatron-Core + Transformer Engine", compute.KERNELS_PER_LAYER,
                           compute.LAUNCH_S, True, True, True, overlap_tp=True,
                           source="Megatron-Core distributed optimizer (overlap grad reduce and param gather), "
                                  "Transformer Engine (fused attention, tp comm overlap, fused grad accumulation)"),
    "fsdp": Profile("fsdp", "PyTorch FSDP + FlashAttention", compute.KERNELS_PER_LAYER, compute.LAUNCH_S, True, True,
                    True, FSDP_BSH_PASSES, CE_PASSES, FSDP_GEMM_EFFICIENCY, FSDP_EXPOSED_SHARE,
                    source="Zhao et al., VLDB 2023, section 3.3.2 (prefetching); nccl-tests issue 119 (ports); "
                           "GEMM share, exposed share and passes fitted once on datasets/llm_foundry_h100.toml"),
    "eager": Profile("eager", "eager PyTorch + transformers", 0, compute.LAUNCH_S, True, False, True,
                     ce_passes=CE_PASSES, gemm_efficiency=EAGER_GEMM_EFFICIENCY, embedding_backward=True,
                     source="GEMM share fitted once on datasets/h200_eager.toml (three H200 runs, issue 21); "
                            "bytes and ops per layer counted from transformers' code",
                     dispatch_s=EAGER_BARE_OP_S, counted=EAGER_ELEMENTWISE),
    "deepspeed-2021": Profile("deepspeed-2021", "DeepSpeed ZeRO-3 + Megatron-LM (2021)", compute.KERNELS_PER_LAYER,
                              compute.LAUNCH_S, False, True, False, exposed_share=DEEPSPEED_EXPOSED_SHARE,
                              attention="explicit", sp=False, pins_kernels=True,
                              reuse_distance=DEEPSPEED_REUSE_DISTANCE,
                              source="Narayanan et al., SC 2021, section 5.2 (DeepSpeed's ZeRO-3 in Megatron-LM); "
                                     "DeepSpeed configuration documentation (prefetch, stage3_max_reuse_distance); "
                                     "one port per GPU and the exposed share fitted on its Table 2"),
}
FRAMEWORKS = tuple(PROFILES)
DEFAULT_FRAMEWORK = "megatron-te"  # what a practitioner runs today (issue 29)


def profile(name: str) -> Profile:
    """The profile called ``name`` (one of ``FRAMEWORKS``), else a LabkitError naming them."""
    return PROFILES[require_choice("framework", name, FRAMEWORKS)]


def embedding_backward_bytes(shape, rows: float, tp: int = 1, grad_bytes: int = 4, in_bytes: int = 4) -> float:
    """Bytes of ``nn.Embedding``'s backward: zero the V x h gradient (its 1/tp vocab slice), read the ``rows``
    output-gradient rows and add each into its row of the gradient (read and write)."""
    return grad_bytes * shape.vocab * shape.hidden / tp + rows * shape.hidden * (in_bytes + 2 * grad_bytes)


def extra_seconds(shape, seq: int, micro_batch: int, tp: int, pp: int, dev, prof: Profile, sp: bool = False,
                  cp: int = 1, loss_s_per_logit: float | None = None) -> float:
    """What the framework adds to one micro-batch's kernels on the last pipeline stage (module text): unfused
    fp32 element-wise passes over b s h in every layer (split over tp under sequence parallelism), the fp32
    cross-entropy over b s V (split over tp: a vocab-parallel loss), and the embedding's backward (first stage;
    the stages run side by side, so counted once). ``cp`` context-parallel GPUs each hold s/cp of the rows;
    ``loss_s_per_logit`` (a calibration's measured cross-entropy) replaces the loss's passes."""
    if not (prof.bsh_passes or prof.counted or prof.ce_passes or prof.embedding_backward):
        return 0.0
    rows = micro_batch * seq / cp
    wide = rows * shape.hidden / (tp if sp else 1)
    logits = rows * shape.vocab / tp
    measured = bool(prof.ce_passes and loss_s_per_logit)
    nbytes = 0.0 if measured else prof.ce_passes * 4 * logits
    if prof.counted is not None:
        prec = prof.counted
        nbytes += shape.layers / pp * rows * eager_elementwise.layer_bytes(shape, prec, tp, sp).total
        nbytes += rows * eager_elementwise.final_norm_bytes(shape, prec).total
        nbytes += eager_elementwise.weight_cast_bytes(shape, prec, tp) / pp
    else:
        nbytes += shape.layers / pp * prof.bsh_passes * 4 * wide
    if prof.embedding_backward:
        nbytes += embedding_backward_bytes(shape, rows, tp)
    return compute.stream_seconds(nbytes, dev) + (loss_s_per_logit * logits if measured else 0.0)


def optimizer_bytes_per_param(implementation: str = "fused", master_weights: bool = False) -> int:
    """Bytes an AdamW step reads and writes per parameter (``ADAMW_BYTES``), plus the master-weight copies."""
    name = require_choice("optimizer", implementation, OPTIMIZER_IMPLEMENTATIONS)
    return ADAMW_BYTES[name] + (MASTER_COPY_BYTES if master_weights else 0)


def optimizer_seconds(params: float, dev, implementation: str = "fused", master_weights: bool = False,
                      s_per_param: float | None = None) -> float:
    """Seconds of the AdamW step over ``params``: its bytes at memory bandwidth, or a measured seconds per
    parameter (``labkit calibrate`` times torch's single-tensor AdamW)."""
    if s_per_param is not None:
        return s_per_param * params
    return compute.stream_seconds(optimizer_bytes_per_param(implementation, master_weights) * params, dev)
