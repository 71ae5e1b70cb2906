"""The whole-step peak of a LoRA/QLoRA step: the moments of ``labkit.predict.step_peak`` with a frozen base.

The same three phases as full training (``step_peak``'s docstring gives each term's source), with what a
frozen base changes: model states are the frozen weights (16-bit, or NF4 under QLoRA) plus the adapters,
their gradients and AdamW states (fp32 master copies in bf16-mixed); the output layer makes no weight
gradient and the MLP's backward no weight gradient either. QLoRA adds one transient: a matrix
dequantized to 16 bits while its layer computes, forward and backward (``labkit.measure.nf4``: the
whole (out, in) matrix and a chunk's workspace of 12 bytes a code byte). Gradient checkpointing keeps a
layer's input and, in backward, rebuilds one layer's activations at a time. Paged optimizer states live
on the host (QLoRA's paged optimizers page them there under memory pressure): they leave every moment.
The in-layer transients both step models use are ``labkit.predict.peak_moments``'s (read off transformers'
modules there): the forward's at the last layer's down projection, or the recomputed layer's working set under
checkpointing, and, for RMSNorm, the final norm's; the MLP's backward. Judged against whole fake steps in
``tests/test_fake_property.py``, whose docstring states the domain claimed and what is not.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from labkit.predict.finetune import Finetune, adapter_tensors, finetune_bytes, layer_terms, matrix_shapes
from labkit.predict.peak_moments import (
    PeakTerm,
    embeddings_held,
    mlp_backward_transients,
    mlp_forward_transients,
    recompute_forward_transients,
    rmsnorm_backward_transients,
    rmsnorm_forward_transients,
)
from labkit.predict.step_peak import StepPeak, adamw_temporaries, cublas_workspace_bytes
from labkit.shapes import ModelShape

CHUNK = 2**18  # code bytes a chunk of NF4 dequantization covers (labkit.measure.nf4.CHUNK)


@dataclass(frozen=True)
class FinetuneStep:
    """A fine-tuning step: the model, the fine-tune, the batch, precision and device."""

    shape: ModelShape
    ft: Finetune
    batch: int
    seq: int
    precision: str = "bf16-mixed"
    device: str = "cpu"
    cuda_major: int = 9


def _states(st: FinetuneStep) -> list[PeakTerm]:
    fb = finetune_bytes(st.shape, st.ft, st.seq, st.batch, st.precision)
    tensors = adapter_tensors(st.shape, st.ft)
    out = [PeakTerm("frozen base", fb.frozen, "NF4 codes and scales" if st.ft.method == "qlora" else
                    "every weight at its precision, once"),
           PeakTerm("adapters", fb.adapters, f"{fb.adapter_params:,} LoRA parameters"),
           PeakTerm("optimizer states", fb.optimizer, "on the host (paged)" if st.ft.paged else
                    "AdamW's moments" + (" and fp32 master weights" if st.precision == "bf16-mixed" else "")),
           PeakTerm("step counters", 0 if st.ft.paged or st.device == "cuda" else 4 * len(tensors),
                    "AdamW's step per tensor, on the host")]
    if st.device == "cuda":
        out += [PeakTerm("cuBLAS workspaces", 2 * cublas_workspace_bytes(st.cuda_major), "CublasHandlePool.cpp"),
                PeakTerm("batch", 16 * st.batch * st.seq, "input ids and labels, int64")]
    return out


def _dequant(st: FinetuneStep, names: tuple[str, ...] | None = None, product: int = 0) -> PeakTerm:
    """The largest of ``names`` decoded to bf16 beside either one chunk's decoding workspace or, once it is
    freed, the matmul's ``product`` (its output, allocated while the decoded weight is alive)."""
    if st.ft.method != "qlora" or names == ():
        return PeakTerm("dequantized weight", 0, "LoRA's base is already 16-bit")
    mats = matrix_shapes(st.shape)
    n = max(i * o for k, (i, o) in mats.items() if names is None or k in names)
    return PeakTerm("dequantized weight", 2 * n + max(12 * min(CHUNK, n // 2), product),
                    "the matrix decoded to bf16, and one chunk's int32 codes and fp32 values or the matmul's output")


def finetune_peak(st: FinetuneStep, reserve_share: float = 0.0) -> StepPeak:
    """The step's peak by phase and term (``reserve_share``: the caching allocator's margin on CUDA)."""
    shape, ft, b, s = st.shape, st.ft, st.batch, st.seq
    e = 4 if st.precision == "fp32" else 2
    fb = finetune_bytes(shape, ft, s, b, st.precision)
    states, bsv, bs = _states(st), b * s * shape.vocab, b * s
    acts = PeakTerm("activations", fb.activations, "every tensor saved for backward")
    logits = [PeakTerm("logits", e * bsv, "the output layer's result")]
    if e != 4:
        logits.append(PeakTerm("fp32 logits", 4 * bsv, "logits.float() before log_softmax"))
    logits.append(PeakTerm("padded labels", 8 * b * (s + 1), "int64 labels padded by one for the shift"))
    held = e * bs * shape.hidden if ft.checkpointing and not shape.gated else 0  # measured on fake steps
    forward = (*states, acts, *logits, PeakTerm("held", 2 * held, "under recompute (GPT-2): the token embedding's "
                                                "output, which the input-grad hook keeps, and the final norm's output"))
    mlp_in = ("gate", "up") if shape.gated else ("up",)
    head = sum(t.bytes for t in _outside_head(shape, ft, s, b, e))
    loss = sum(t.bytes for t in _outside_head(shape, ft, s, b, e) if t.role == "loss")
    layer_acts = PeakTerm("activations", fb.activations - head, "all but the final norm's and loss's")
    if ft.checkpointing:
        in_layer = recompute_forward_transients(shape, b, s, e)
    else:
        in_layer = mlp_forward_transients(shape, b, s, e, ft.targets, first_input_held=shape.layers == 1)
    in_forward = [(*states, layer_acts, in_layer, _dequant(st))]
    if ft.method == "qlora" and not ft.checkpointing:  # the down projection's output waits for its decoded weight
        in_forward = [(*states, layer_acts, mlp_forward_transients(shape, b, s, e, ft.targets, shape.layers == 1,
                                                                   decoding=True), _dequant(st)),
                      (*states, layer_acts, in_layer)]
    elif ft.method == "qlora":  # recompute: a decoded weight and the layer's working set, each with what is held
        in_forward = [(*states, layer_acts, in_layer),
                      (*states, layer_acts, PeakTerm("held", embeddings_held(shape, b, s, e), "the embeddings"),
                       _dequant(st))]
    if shape.norm == "rmsnorm":
        in_forward.append((*states, PeakTerm("activations", fb.activations - loss, "all but the loss's"),
                           PeakTerm("held", embeddings_held(shape, b, s, e) + (e * bs * shape.hidden if e != 4 else 0),
                                    "the embeddings the model keeps, the last layer's output (16-bit)"),
                           rmsnorm_forward_transients(bs * shape.hidden, bs, e)))
    at_loss = (*states, acts, PeakTerm("held", held, "under recompute (GPT-2): the token embedding's output"),
               PeakTerm("log-probabilities' gradient", 4 * bsv, "nll_loss_backward"),
               PeakTerm("logits' fp32 gradient", 4 * bsv, "_log_softmax_backward_data"))
    per_grad = e * sum(adapter_tensors(replace(shape, layers=1), ft))

    def in_layers(at: int) -> list[tuple[PeakTerm, ...]]:
        below = sum(fb.per_layer[:at + 1]) + fb.outside - head
        if ft.checkpointing:
            # LoRA's embedding output needs a gradient under recompute (measured: the first layer's first norm
            # keeps its input); the QLoRA step's does not (Llama-2-7B's widths, tests/test_fake_full.py)
            below += sum(t.bytes for t in layer_terms(shape, ft, s, b, e, grad_in=at > 0 or ft.method == "lora"))
        base = (*states, PeakTerm("activations", below, f"layers 0-{at} (and the recomputed layer)"),
                PeakTerm("gradients", per_grad * (shape.layers - 1 - at), "the adapters of the layers done"),
                PeakTerm("flowing gradient", e * bs * shape.hidden, "the gradient of the layer's output"))
        bsf = e * bs * shape.ffn_size
        freed = bsf if "down" in ft.targets and not shape.gated else 0
        at_act = (*base[:-3], PeakTerm("activations", below - freed, "less the down adapter's input (GPT-2: freed "
                                       "by its backward)"), *base[-2:], mlp_backward_transients(bsf))
        return [at_act,
                (*base, _dequant(st, ("down",) if st.ft.method == "qlora" else (), e * bs * shape.ffn_size)),
                (*base[:-3], PeakTerm("activations", below - (0 if ft.checkpointing else bsf * (
                                          (3 if shape.gated else 4) + ("down" in ft.targets))),
                                      "less the activation's saved tensors and the down adapter's input, freed"),
                 *base[-2:], PeakTerm("MLP gradients", (2 if shape.gated else 1) * e * bs * shape.ffn_size,
                                 "the activation's input gradients (SwiGLU: the gate's and the up projection's), "
                                 "while the up (and gate) projection's weight is decoded"),
                 _dequant(st, mlp_in, e * bs * shape.hidden))]

    moments = [at_loss, *in_layers(shape.layers - 1), *in_layers(0)]
    if shape.norm == "rmsnorm":
        moments.append((*states, PeakTerm("activations", fb.activations - loss, "all but the loss's"),
                        rmsnorm_backward_transients(bs * shape.hidden, e, frozen_head=True)))
    backward = max(moments, key=lambda ts: sum(t.bytes for t in ts))
    n = sum(adapter_tensors(shape, ft))
    opt = [*states, PeakTerm("gradients", fb.gradients, "the adapters' gradients")]
    if st.precision == "bf16-mixed":
        opt.append(PeakTerm("fp32 gradient copies", 4 * n, "MasterWeightAdamW.step: p.grad.float()"))
    opt.append(PeakTerm("AdamW temporaries", 0 if ft.paged else adamw_temporaries(adapter_tensors(shape, ft), "lab"),
                        "single-tensor AdamW: sqrt and division of the largest adapter"))
    fwd = max((forward, *in_forward), key=lambda ts: sum(t.bytes for t in ts))
    phases = {"forward": fwd, "backward": backward, "optimizer": tuple(opt)}
    peak = max(sum(t.bytes for t in ts) for ts in phases.values())
    reserve = PeakTerm("caching allocator's reserve", reserve_share * peak if st.device == "cuda" else 0.0,
                       "blocks the allocator keeps beyond the peak (CUDA); a margin, not a need")
    return StepPeak(phases, reserve)


def _outside_head(shape: ModelShape, ft: Finetune, s: int, b: int, e: int):
    from labkit.predict.finetune import outside_terms

    return [t for t in outside_terms(shape, ft, s, b, e) if t.role in ("final norm", "loss")]
