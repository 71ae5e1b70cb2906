"""What the chunked loss (``labkit.measure.chunked_loss``: the output layer and cross-entropy over ``chunks``
sequence chunks, each under ``torch.utils.checkpoint``) changes in a step's bytes, against transformers' loss.

Activations: the fp32 log-probabilities (4*b*s*V) and the shifted labels transformers' loss keeps are gone; the
checkpoints save views of the final norm's output (the output layer's input, kept anyway) and of the int64
labels padded by one, whose storage is 8*b*(s+1). Measured to the byte under fake tensors
(``tests/test_fake_conventions.py``).

Peak: at the end of the forward the largest chunk (``c`` = ceil(s/chunks) positions) holds its fp32 logits
and their log-softmax, 8*b*c*V bytes whatever the precision (the 16-bit logits are freed once upcast; a few
hundred bytes of scalars beside them are left out); transformers' loss holds the whole logits and, in 16-bit
runs, their fp32 copy instead (``labkit.predict.step_peak``). In backward a recomputed chunk holds its
log-probabilities, their gradient and the logits' fp32 gradient, 12*b*c*V, beside the output layer's weight
gradient once a chunk is done (and the finished chunks' hidden-state gradients, which the split's backward
holds until the last); each later chunk's weight gradient arrives as a matmul's output and its transpose, two
more of the output layer's gradient, before it is added (measured under fake tensors). The in-layer moments
are ``step_peak``'s, the final RMSNorm's backward ``rmsnorm_backward_transients``. Forward and backward are
within 16 KB on one layer at Llama-2-7B's widths (1 to 4 chunks, fp32 and bf16-mixed). A frozen output
layer (LoRA) saves no input, so there the checkpoints' views of the final norm's output add e*b*s*h
(``labkit.measure.fake_full_ft``); the LoRA peak with chunks is not predicted.
"""

from __future__ import annotations

from dataclasses import replace

from labkit.errors import require_positive
from labkit.predict.step_peak import (
    PeakTerm,
    StepPeak,
    StepShape,
    backward_in_layers,
    rmsnorm_backward_transients,
    state_terms,
    step_peak,
)


def chunk_len(seq: int, chunks: int) -> int:
    """The longest chunk ``torch.chunk`` makes of ``seq`` positions in ``chunks`` pieces."""
    return -(-seq // require_positive("loss_chunks", chunks))


def chunked_outside(outside: float, loss_term: float, batch: int, seq: int) -> float:
    """Bytes saved outside the layers with the chunked loss: transformers' ``loss`` term (``loss_term``) out,
    the padded int64 labels in."""
    return outside - loss_term + 8 * batch * (seq + 1)


def chunked_loss_peak(s: StepShape, chunks: int) -> StepPeak:
    """The step's peak with the chunked loss; ``s.outside`` already ``chunked_outside``'s."""
    c, states = chunk_len(s.seq, chunks), state_terms(s)
    bcv = s.batch * c * s.vocab
    acts = PeakTerm("activations", s.activations, "every tensor saved for backward")
    forward = (*states, acts, PeakTerm("chunk logits", 8 * bcv, "one chunk's fp32 logits and log-softmax"))
    head = PeakTerm("output layer gradient", s.weight_bytes * s.head_params, "accumulated over the chunks")
    n = -(-s.seq // c)  # chunks torch.chunk makes
    flow = PeakTerm("hidden-state gradients", s.act_bytes * s.batch * c * s.hidden * (n - 1), "the chunks done")
    chunk = PeakTerm("chunk backward", 12 * bcv, "a recomputed chunk's log-probabilities, their gradient and the "
                     "logits' fp32 gradient")
    first, last = (*states, acts, chunk), (*states, acts, head, flow, chunk)
    adding = (*states, acts, head, flow, PeakTerm("chunk weight gradient", 2 * s.weight_bytes * s.head_params,
              "a later chunk's output-layer weight gradient and its transpose, before they join the accumulated one"))
    moments = [first, *([last, adding] if n > 1 else []),
               *(backward_in_layers(s, states, at) for at in (s.layers - 1, 0))]
    if s.rmsnorm:
        moments.append((*states, PeakTerm("activations", s.activations - 8 * s.batch * (s.seq + 1), "all but the "
                                          "padded labels"), head,
                        rmsnorm_backward_transients(s.batch * s.seq * s.hidden, s.act_bytes)))
    base = step_peak(s)
    phases = {"forward": forward, "backward": max(moments, key=lambda ts: sum(t.bytes for t in ts)),
              "optimizer": base.phases["optimizer"]}
    return StepPeak(phases, replace(base.reserve, bytes=0.0))


def hf_chunked_peak(spec, batch: int, seq: int, precision: str, chunks: int, attention: str = "sdpa",
                    cache: bool | None = None, dropout: float | None = None, device: str = "cpu",
                    cuda_major: int = 9) -> tuple[StepPeak, float, float]:
    """(the peak, bytes per layer, bytes outside) of a transformers model of ``spec`` with the chunked loss."""
    from labkit.predict.activation_options import ActivationOptions, outside_terms_hf
    from labkit.predict.step_inputs import hf_step_shape

    plain = hf_step_shape(spec, batch, seq, precision, attention, cache, dropout, device, "lab", cuda_major)
    opt = ActivationOptions.for_model(spec, attention, cache=cache, act_bytes=plain.act_bytes, mask_bytes=1 if
                                      device == "cuda" else None, dropout=dropout, seq=seq, cuda=device == "cuda")
    loss = sum(t.bytes for t in outside_terms_hf(spec.shape, seq, batch, opt, plain.act_bytes) if t.role == "loss")
    s = replace(plain, outside=chunked_outside(plain.outside, loss, batch, seq),
                head_outside=chunked_outside(plain.head_outside, loss, batch, seq))
    return chunked_loss_peak(s, chunks), s.per_layer, s.outside
